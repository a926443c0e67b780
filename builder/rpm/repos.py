"""Yum repositories, one per architecture, as Fedora and RHEL publish theirs
(`BaseOS/x86_64/os/`): DIR/NAME/ARCH/ holds that architecture's packages and every noarch
package, with its own repodata. dnf and libsolv then see only what the machine can install,
and a device's repository URL names its architecture (`.../repo/aarch64/`).

Each architecture's repository is a content-addressed step of its own: a run narrowed to
one architecture (`--arch`) publishes that one and leaves the others in place.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from builder.context import Context
from builder.core.steps import Step, file_digest, materialize, publish
from builder.rpm.rpmbuild import createrepo


def rpms_for(rpms: list[Path], arch: str) -> list[Path]:
    """The packages a machine of `arch` installs from: its own and the noarch ones."""
    return [rpm for rpm in rpms if rpm.name.endswith((f".{arch}.rpm", ".noarch.rpm"))]


def publish_arch_repos(ctx: Context, rpms: list[Path], top: Path, *,
                       signed_by: str | None = None,
                       sign: Callable[[Path], object] | None = None) -> list[Path]:
    """Publish TOP/ARCH (TOP a directory of the build directory's layout) for every
    architecture of the run; return the directories."""
    epoch = ctx.release.source_date_epoch
    name = top.relative_to(ctx.build_dir).as_posix()
    _drop_single_repo_layout(ctx, top)
    published = []
    for arch in ctx.release.architectures:
        selected = rpms_for(rpms, arch)
        step = Step(f"{name}:{arch}", {
            "rpms": {rpm.name: file_digest(rpm) for rpm in selected}, "epoch": epoch,
            "arch": arch, "signed_by": signed_by})

        def make_repo(out: Path, selected: list[Path] = selected) -> None:
            createrepo(ctx.runner, selected, out, epoch)
            if sign is not None:
                sign(out)

        out, _ = materialize(step, ctx.build_dir, make_repo, ctx.progress)
        publish(ctx.build_dir, f"{name}/{arch}", step, out)
        ctx.progress.info(f"{arch}: {len(selected)} RPMs in {top / arch}")
        published.append(top / arch)
    return published


def _drop_single_repo_layout(ctx: Context, top: Path) -> None:
    """A build directory from before per-architecture repositories has TOP/repodata:
    it would shadow nothing but mislead whoever serves TOP, so it goes."""
    if (top / "repodata").is_dir():
        for legacy in ("repodata", "Packages"):
            shutil.rmtree(top / legacy, ignore_errors=True)
    marker = ctx.layout.published_marker(top.relative_to(ctx.build_dir).as_posix())
    if marker.is_file():
        marker.unlink()
