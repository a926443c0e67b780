"""`python -m builder blueprint`: render, validate, check the image cache, depsolve, write.

Outputs, beside each other in DIR/blueprints/:
- NAME.toml: the blueprint, as Image Builder (or the local compose) takes it;
- NAME.ARCH.lock.json, one per architecture of the release: the depsolved transaction,
  every package's exact NEVRA, repository, location href and checksum, sorted, as stable
  JSON. The blueprint itself names no architecture, as Image Builder's do.
Nothing is written unless all steps pass, and a failure removes the image's previous outputs,
so a compose can never pick up a blueprint that no longer matches release.yaml.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.blueprint.depsolve import RepoSource, depsolve, repo_sources
from builder.blueprint.images import check_architectures, component_images, missing_images
from builder.blueprint.render import BLUEPRINTS_DIR, Profile, load_profile, render_blueprint
from builder.blueprint.target import target_ref
from builder.blueprint.validate import check_blueprint
from builder.context import Context
from builder.core.errors import BuildError


@dataclass(frozen=True)
class BlueprintOutput:
    toml: Path
    locks: tuple[Path, ...]  # one per architecture, in release.yaml's order
    packages: int            # packages in the first architecture's transaction


def lock_paths(out_dir: Path, name: str, arches: tuple[str, ...]) -> tuple[Path, ...]:
    return tuple(out_dir / f"{name}.{arch}.lock.json" for arch in arches)


def build_blueprint(ctx: Context, name: str,
                    blueprints_dir: Path = BLUEPRINTS_DIR) -> BlueprintOutput:
    """Render, validate, check the offline image cache and depsolve one image's blueprint;
    write its TOML and lock files only when all four pass."""
    release = ctx.release
    profile = load_profile(name, blueprints_dir)
    out_dir = ctx.layout.blueprints
    toml_path = out_dir / f"{name}.toml"
    locks = lock_paths(out_dir, name, release.architectures)
    shown = f"blueprints/{name}.toml"
    try:
        with ctx.progress.step(f"blueprint: {name} ({', '.join(profile.components)})"):
            text = render_blueprint(release, profile)
            data = check_blueprint(text, shown)
            cached = [c["source"] for c in data.get("containers", [])]
            with tempfile.TemporaryDirectory(prefix="plugins-") as scratch:
                problems = missing_images(
                    component_images(release, profile.components, Path(scratch)), cached)
            if problems:
                raise BuildError(f"{shown}: the image cache misses what the components run:\n"
                                 + "\n".join(problems))
            check_architectures(release, cached, shown)
            ctx.progress.info(f"valid; {len(cached)} images cached by digest")
            documents = _depsolve_all(ctx, profile, data, text, shown)
            files = {toml_path: text.encode()}
            files.update({path: _json_bytes(doc) for path, doc in zip(locks, documents,
                                                                      strict=True)})
            _write_all(out_dir, files)
    except BuildError:
        for stale in (toml_path, *locks):
            stale.unlink(missing_ok=True)
        raise
    for path in (toml_path, *locks):
        ctx.progress.wrote(str(path), path.stat().st_size)
    return BlueprintOutput(toml=toml_path, locks=locks, packages=len(documents[0]["packages"]))


def _depsolve_all(ctx: Context, profile: Profile, data: Mapping[str, Any], text: str,
                  shown: str) -> list[dict[str, Any]]:
    release = ctx.release
    wanted = [(p["name"], p.get("version", "")) for p in data.get("packages", [])]
    documents = []
    with ctx.progress.step(f"depsolve: {len(wanted)} packages with libsolv"):
        for arch in release.architectures:
            sources = repo_sources(ctx.build_dir, release, arch)
            try:
                locked = depsolve(wanted, sources, arch, ctx.layout.cache("repos"),
                                  runner=ctx.runner)
            except BuildError as exc:
                raise BuildError(f"{shown}: {exc.message}", exc.hint) from exc
            ctx.progress.info(f"{arch}: {len(locked)} packages in the transaction")
            documents.append({
                "blueprint": data["name"],
                "version": data.get("version", ""),
                "release": release.evr,
                "arch": arch,
                "ref": target_ref(release, arch, data["name"], profile.ref(arch)),
                "blueprint_sha256": hashlib.sha256(text.encode()).hexdigest(),
                "repos": {s.name: _repo_entry(s, ctx.layout.blueprints) for s in sources},
                "packages": [pkg.as_json() for pkg in locked],
            })
    return documents


def _repo_entry(source: RepoSource, lock_dir: Path) -> dict[str, str]:
    """Where the lock's `location`s resolve: the build dir's own repositories relative to the
    lock file (so a build dir can move), others as given in release.yaml."""
    if source.kind == "url":
        return {"kind": "url", "url": source.location}
    if source.kind in ("project", "sample"):
        return {"kind": source.kind, "path": os.path.relpath(source.location, lock_dir)}
    return {"kind": source.kind, "path": source.location}


def _json_bytes(document: Mapping[str, Any]) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def _write_all(out_dir: Path, files: Mapping[Path, bytes]) -> None:
    """Write every file to a temporary name, then rename them all into place."""
    out_dir.mkdir(parents=True, exist_ok=True)
    staged: dict[Path, Path] = {}
    try:
        for path, data in files.items():
            handle, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", dir=out_dir)
            with os.fdopen(handle, "wb") as stream:
                stream.write(data)
            os.chmod(tmp_name, 0o644)
            staged[path] = Path(tmp_name)
        for path, tmp in staged.items():
            os.replace(tmp, path)
    finally:
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)
