"""Build (or find) the SAMPLE bootable base commit in DIR/baseos/repo.

The commit is content-addressed like every step: its identity is a sha256 over the Debian
source (suite, mirror, package list), the overlay's files, the SAMPLE stand-in RPMs it
records, the epoch and the layout version, kept in the commit's metadata. A commit of the
same identity on the ref is reused and the step says so.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from builder.baseos import greenboot
from builder.baseos.debian import (
    BOOTC_STANDIN,
    OVERLAY,
    DebianSource,
    debian_source,
    installed_packages,
    mmdebstrap,
    require_root,
)
from builder.baseos.tree import make_bootable_tree
from builder.context import Context
from builder.core.diskspace import MiB, ensure_space
from builder.core.errors import BuildError
from builder.core.files import write_atomic
from builder.core.ostree import Repo
from builder.core.steps import canonical_json, file_digest, tree_digest
from builder.rpm.repos import rpms_for

# Bump when the tree's layout changes: it is part of the base's identity.
LAYOUT = 1
REF = "sample/debian12/{arch}/base"
# What mmdebstrap's tree, its commit and the temporary copies take at most (measured: a
# 420 MiB tree).
SPACE = 1600 * MiB


@dataclass(frozen=True)
class BootableBase:
    repo: Path
    ref: str
    commit: str
    kernel: str
    built: bool  # False: the cached commit was reused

    def release_snippet(self) -> str:
        """What release.yaml says to compose onto this base."""
        return f'ostree: {{base: {{repo: {self.repo}, ref: "{REF}"}}}}'


def base_repo(ctx: Context) -> Repo:
    return Repo(ctx.layout.bootable_base_repo, ctx.runner)


def ensure_bootable_base(ctx: Context, mirror: str | None = None) -> BootableBase:
    arch = ctx.target_arch
    source = debian_source(arch, mirror)
    standins = _standins(ctx)
    # Checked before anything is built: mmdebstrap takes minutes.
    release = greenboot.verified()
    identity = hashlib.sha256(canonical_json({
        "debian": source.identity(), "overlay": tree_digest(OVERLAY),
        "bootc": file_digest(BOOTC_STANDIN),
        "greenboot": tree_digest(greenboot.FILES), "greenboot-pins": file_digest(greenboot.PINS),
        "standins": {rpm.name: file_digest(rpm) for rpm in standins},
        "epoch": ctx.release.source_date_epoch, "layout": LAYOUT,
        # How the tree is laid out is this package's code: a change to it is a new base.
        "code": {p.name: file_digest(p) for p in sorted(Path(__file__).parent.glob("*.py"))},
    })).hexdigest()
    repo, ref = base_repo(ctx), REF.format(arch=arch)
    existing = repo.rev_parse(ref) if repo.exists() else None
    if existing and repo.metadata(existing, "microshift.base-inputs") == identity:
        ctx.progress.skipped(f"SAMPLE bootable base ({arch})", identity)
        kernel = repo.metadata(existing, "microshift.kernel") or ""
        return BootableBase(repo.path, ref, existing, kernel, built=False)
    require_root("the SAMPLE bootable base")
    ensure_space(ctx.build_dir, SPACE, "the SAMPLE bootable base")
    with ctx.progress.step(f"SAMPLE bootable base: Debian {source.suite} {source.debian_arch} "
                           f"from {source.mirror}"):
        commit, kernel = _build(ctx, repo, ref, source=source, standins=standins,
                                identity=identity, release=release)
    return BootableBase(repo.path, ref, commit, kernel, built=True)


def _standins(ctx: Context) -> list[Path]:
    rpms = rpms_for(sorted(ctx.layout.sample_base_rpms.glob("*.rpm")), ctx.target_arch)
    if not rpms:
        raise BuildError(f"no SAMPLE base RPMs in {ctx.layout.sample_base_rpms}: the "
                         "bootable base records them in its rpm database",
                         hint=f"run `python -m builder sample-base --build-dir "
                              f"{ctx.build_dir}` first")
    return rpms


def _build(ctx: Context, repo: Repo, ref: str, *, source: DebianSource,
           standins: list[Path], identity: str,
           release: greenboot.Release) -> tuple[str, str]:
    epoch = ctx.release.source_date_epoch
    repo.init("bare")
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=repo.path.parent))
    try:
        tree = work / "tree"
        mmdebstrap(ctx.runner, ctx.progress, source, tree, epoch)
        packages = installed_packages(tree)
        kernel = make_bootable_tree(ctx.runner, tree, standins, epoch, release)
        record = tree / "usr/share/sample-base/packages.txt"
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text("".join(f"{line}\n" for line in packages))
        size = sum(p.stat().st_size for p in tree.rglob("*")
                   if p.is_file() and not p.is_symlink())
        ctx.progress.info(f"tree: {len(packages)} packages, kernel {kernel}, "
                          f"{size / MiB:.0f} MiB")
        commit = repo.commit(
            tree, subject=f"SAMPLE bootable base OS (Debian {source.suite}, {source.arch})",
            timestamp=epoch, parent=None, bind_ref=ref,
            metadata={"version": f"12.sample.{identity[:8]}", "microshift.sample": "true",
                      "microshift.base-inputs": identity, "microshift.kernel": kernel})
        repo.set_ref(ref, commit)
        write_atomic(repo.path.parent / f"{source.arch}.json", json.dumps({
            "ref": ref, "commit": commit, "kernel": kernel, "identity": identity,
            "debian": source.identity(), "installed": packages,
            "greenboot": {"tag": release.tag, "commit": release.commit}},
            indent=2).encode() + b"\n")
        ctx.progress.info(f"{ref} = {commit} in {repo.path}")
        return commit, kernel
    finally:
        shutil.rmtree(work, ignore_errors=True)
