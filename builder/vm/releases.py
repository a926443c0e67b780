"""The two releases a VM scenario updates between, built by the pipeline itself.

v1 and v2 are the user's release.yaml composed onto the SAMPLE bootable base through
`ostree.base` (the path a RHEL for Edge base commit takes), each by the same stages as
`build-image`: RPMs, blueprint and depsolve, compose (signed, v2's parent is v1), then the
static delta v1 -> v2 with its offline file and the signed update index. v2 is the next
patch release (4.14.2 -> 4.14.3, an hour later); a bad v2 carries the SAMPLE MicroShift whose API
never becomes ready, the kind of broken build greenboot exists to roll back.
"""

from __future__ import annotations

import copy
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from builder.baseos.bootable import REF as BASE_REF
from builder.baseos.bootable import BootableBase
from builder.chain import run_chain
from builder.context import Context
from builder.core.build_layout import Layout
from builder.core.errors import InputError
from builder.core.ostree import Repo
from builder.plan import BuildOptions, Keys, make_plan
from builder.release.document import BINARY

IMAGE = "microshift-minimal"   # core alone: no Open vSwitch or LVM on the SAMPLE base
LOCAL_SOURCES = ("oci:", "oci-archive:", "docker-archive:", "dir:")


@dataclass(frozen=True)
class BuiltPair:
    build_dir: Path        # the scenario's own build directory
    ref: str
    v1: str
    v2: str
    v1_version: str
    v2_version: str
    public_key: Path       # what the device's remote verifies commits and indexes with


def write_release_files(ctx: Context, base: BootableBase, out: Path,
                        bad_v2: bool) -> tuple[Path, Path]:
    """out/v1.yaml and out/v2.yaml, from the run's release file."""
    source = ctx.release_path
    data = yaml.safe_load(source.read_text())
    _absolute_paths(data, source.parent)
    data["ostree"] = {**(data.get("ostree") or {}),
                      "base": {"repo": str(base.repo), "ref": BASE_REF}}
    data["architectures"] = [ctx.target_arch]
    second = copy.deepcopy(data)
    second["version"] = next_version(str(data["version"]))
    second["source_date_epoch"] = int(data["source_date_epoch"]) + 3600
    if bad_v2:
        _never_ready(second, str(source))
    out.mkdir(parents=True, exist_ok=True)
    paths = (out / "v1.yaml", out / "v2.yaml")
    for path, document in zip(paths, (data, second), strict=True):
        path.write_text("# Written by python -m builder device simulate --vm from "
                        f"{source}\n" + yaml.safe_dump(document, sort_keys=False))
    return paths


def next_version(version: str) -> str:
    """The next patch release: 4.14.2 -> 4.14.3 (MicroShift's data then belongs to it)."""
    head, _, last = version.rpartition(".")
    return f"{head}.{int(last) + 1}" if head and last.isdigit() else f"{version}.1"


def _never_ready(data: dict[str, Any], file: str) -> None:
    files = ((data.get("components") or {}).get("core") or {}).get("payload", {})
    entries = files.get("files", []) if isinstance(files, dict) else []
    for entry in entries:
        if entry.get("install") == BINARY and entry.get("sample") == "microshift":
            entry["sample"] = "microshift-never-ready"
            return
    raise InputError(file, "components.core.payload.files",
                     f"bad-update needs the SAMPLE MicroShift (`{{install: {BINARY}, sample: "
                     "microshift}`) to build a v2 whose API never becomes ready; this release "
                     "has a real payload", hint="run bad-update with the sample release.yaml")


def _absolute_paths(node: Any, root: Path) -> None:
    """Relative paths of the release (payload files, image sources, keys) stay valid when
    the derived files are written elsewhere."""
    if isinstance(node, list):
        for item in node:
            _absolute_paths(item, root)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if isinstance(value, str) and key in ("path", "gpg_key", "repo") \
                and not value.startswith(("/", "http://", "https://")):
            node[key] = str(root / value)
        elif key == "source" and isinstance(value, str) and value.startswith(LOCAL_SOURCES):
            kind, _, path = value.partition(":")
            if not path.startswith("/"):
                node[key] = f"{kind}:{root / path}"
        else:
            _absolute_paths(value, root)


def build_pair(ctx: Context, build_dir: Path, releases: tuple[Path, Path]) -> BuiltPair:
    """Build v1, then v2 onto the same ref, signed with the build directory's SAMPLE key,
    through the same chain as `build-image` (builder/chain.py): v1 up to its compose, v2 on
    to the delta from v1. The ref starts empty each time (a rerun's v1 would follow its
    own v2); the RPM and blueprint steps' caches are kept."""
    layout = Layout(build_dir)
    for published in (layout.ostree, layout.deltas):
        shutil.rmtree(published, ignore_errors=True)
    commits, versions, ref = [], [], ""
    for number, release in enumerate(releases, 1):
        run = Context(build_dir, release, ctx.progress, ctx.runner, ctx.target_arch)
        stages = ("rpms", "blueprint", "compose", *(("deltas",) if number == 2 else ()))
        plan = make_plan(run, [IMAGE], keys=Keys.of(run, sample_always=True),
                         options=BuildOptions(stages=stages, deltas_from=1,
                                              scratch_delta=False))
        with ctx.progress.step(f"v{number}: {run.release.evr} ({IMAGE}) onto the SAMPLE "
                               "bootable base"):
            run_chain(run, plan)
        [target] = plan.targets
        commit = Repo(layout.ostree_repo, run.runner).rev_parse(target.ref)
        assert commit is not None  # the compose stage made it
        commits.append(commit)
        versions.append(run.release.evr)
        ref = target.ref
    return BuiltPair(build_dir, ref, commits[0], commits[1], versions[0], versions[1],
                     layout.sample_public_key)
