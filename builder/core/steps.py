"""Content-addressed build steps, in the manner of osbuild's Stage.id.

A step's id is the sha256 of canonical JSON over its name, its inputs and its parents' ids.
Its output lives in BUILD/.steps/NAME/ID/ and is created in a temporary directory that is
renamed into place only when complete, so an interrupted build never leaves a half step
that a later run would trust.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from builder.core.build_layout import Layout
from builder.core.progress import Progress

STAMP = "step.json"


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class Step:
    name: str
    inputs: Mapping[str, Any]
    parents: tuple[str, ...] = field(default=())

    @property
    def id(self) -> str:
        body = {"name": self.name, "inputs": self.inputs, "parents": list(self.parents)}
        return hashlib.sha256(canonical_json(body)).hexdigest()

    def output_dir(self, build_dir: Path) -> Path:
        return Layout(build_dir).steps / self.name.replace("/", "_").replace(":", "_") / self.id


def is_built(step: Step, build_dir: Path) -> bool:
    return (step.output_dir(build_dir) / STAMP).is_file()


def materialize(step: Step, build_dir: Path, produce: Callable[[Path], None],
                progress: Progress) -> tuple[Path, bool]:
    """Return (output dir, built?) — running `produce(tmpdir)` only when the step is new."""
    out = step.output_dir(build_dir)
    if (out / STAMP).is_file():
        progress.skipped(step.name, step.id)
        return out, False
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=out.parent))
    try:
        produce(tmp)
        (tmp / STAMP).write_bytes(canonical_json(
            {"name": step.name, "id": step.id, "inputs": step.inputs,
             "parents": list(step.parents)}))
        if out.exists():  # a stale dir without a stamp from a crash
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out, True


def replace_dir(target: Path, fill: Callable[[Path], None]) -> None:
    """Fill a fresh directory and swap it in place of `target` at the end."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        fill(tmp)
        tmp.chmod(0o755)
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 and mode of every file under root, by relative path."""
    return {p.relative_to(root).as_posix(): f"{file_digest(p)}:{p.stat().st_mode & 0o777:o}"
            for p in sorted(root.rglob("*")) if p.is_file()}


def publish(build_dir: Path, name: str, step: Step, source: Path) -> bool:
    """Make BUILD/NAME a hard-linked copy of `source` (a step's output), unless it already is.

    Returns False when BUILD/NAME already holds this step's output. The published id is kept
    in BUILD/.published/NAME so user-facing directories carry no bookkeeping files.
    """
    marker = Layout(build_dir).published_marker(name)
    target = build_dir / name
    if target.is_dir() and marker.is_file() and marker.read_text() == step.id:
        return False

    def fill(tmp: Path) -> None:
        for path in sorted(source.rglob("*")):
            dest = tmp / path.relative_to(source)
            if path.name == STAMP and path.parent == source:
                continue
            if path.is_dir():
                dest.mkdir()
            else:
                dest.hardlink_to(path)

    replace_dir(target, fill)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(step.id)
    return True


def link_files(files: list[Path], dest: Path) -> None:
    """Hard-link each file into dest under its own name."""
    for path in files:
        (dest / path.name).hardlink_to(path)


@lru_cache(maxsize=1)
def builder_code_digest() -> str:
    """sha256 over the builder package's own Python sources: part of the identity of a step
    whose output this code shapes beyond its declared inputs (a compose's tree), so a new
    builder never reuses what an old one made."""
    package = Path(__file__).resolve().parent.parent
    return hashlib.sha256(canonical_json({
        path.relative_to(package).as_posix(): file_digest(path)
        for path in sorted(package.rglob("*.py"))})).hexdigest()
