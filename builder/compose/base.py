"""The base ostree commit a compose layers onto.

Production: an existing RHEL for Edge commit, pulled from a local repository path or an
HTTP(S) URL (release.yaml `ostree.base: {repo: ..., ref: ...}`) into the build repository.

Offline demos and tests: a SAMPLE base composed here from DIR/sample-base/rpms (stand-in
packages: a kernel file, an os-release, systemd directories...) with the same layout rules a
real edge commit follows: the rpm database under /usr, /etc stored as /usr/etc, empty /var,
the ostree integration symlinks. It is labelled SAMPLE in its subject and metadata, and
rebuilt only when its input RPMs change.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from builder.compose.labels import Labelling, commit_label_args, tree_labelling
from builder.compose.rootfs import (
    clean_rpmdb,
    etc_to_usr_etc,
    rpm_env,
    var_to_tmpfiles,
)
from builder.context import Context
from builder.core.children import temporary_gnupg_home, tool_tmpdir
from builder.core.diskspace import MiB, ensure_space
from builder.core.errors import BuildError
from builder.core.ostree import Repo
from builder.core.steps import canonical_json, file_digest
from builder.release.ostree_config import OstreeBase
from builder.rpm.repos import rpms_for

SAMPLE_DBPATH = "/usr/lib/sysimage/rpm"
# Bump when the sample layout below changes: it is part of the base's identity.
SAMPLE_LAYOUT = 2
# What rpm-ostree's rootfs layout provides (rpmostree-postprocess.cxx and
# rpm-ostree-0-integration.conf).
INTEGRATION_LINKS = {"ostree": "sysroot/ostree", "tmp": "sysroot/tmp", "home": "var/home",
                     "root": "var/roothome", "opt": "var/opt", "srv": "var/srv",
                     "mnt": "var/mnt", "media": "run/media", "usr/local": "../var/usrlocal"}
INTEGRATION_DIRS = ("sysroot", "boot", "dev", "proc", "run", "sys")
INTEGRATION_TMPFILES = """\
# SAMPLE base: the /var directories the ostree integration symlinks point to
# (what rpm-ostree-0-integration.conf provides on RHEL for Edge).
d /var/home 0755 root root -
d /var/roothome 0700 root root -
d /var/opt 0755 root root -
d /var/srv 0755 root root -
d /var/mnt 0755 root root -
d /var/usrlocal 0755 root root -
d /var/usrlocal/bin 0755 root root -
d /var/usrlocal/sbin 0755 root root -
d /run/media 0755 root root -
"""


@dataclass(frozen=True)
class BaseCommit:
    checksum: str
    is_sample: bool
    description: str


def ensure_base(ctx: Context, build_repo: Repo, workdir: Path) -> BaseCommit:
    base = ctx.release.ostree.base
    if base.is_sample:
        return _sample_base(ctx, build_repo, workdir)
    return _pull_base(ctx, build_repo, base)


def _pull_base(ctx: Context, build_repo: Repo, base: OstreeBase) -> BaseCommit:
    # One base per architecture: `ref: rhel/9/{arch}/edge` names each one's.
    base = replace(base, ref=base.ref.replace("{arch}", ctx.target_arch))
    with ctx.progress.step(f"base commit: {base.ref} from {base.location}"):
        if base.kind == "path":
            source = Repo(Path(base.location), ctx.runner)
            checksum = source.rev_parse(base.ref)
            if checksum is None:
                raise BuildError(f"base repository {base.location} has no ref {base.ref}",
                                 hint="check release.yaml ostree.base.ref")
            build_repo.pull_local(Path(base.location), checksum)
        else:
            args = ["remote", "add", "--force"]
            args += ([f"--gpg-import={base.gpg_key}", "--set=gpg-verify=true"]
                     if base.gpg_key else ["--no-gpg-verify"])
            # ostree imports and verifies in GnuPG homes of its own under $TMPDIR: inside a
            # recorded one, so the run's end finds any agent left there.
            with temporary_gnupg_home("ostree-base-") as scratch:
                env = tool_tmpdir(scratch)
                ctx.runner.run(["ostree", f"--repo={build_repo.path}", *args, "base",
                                base.location], env=env)
                if not base.gpg_key:
                    ctx.progress.info("base commit is NOT signature-checked "
                                      "(ostree.base.gpg_key is not set)")
                ctx.runner.run(["ostree", f"--repo={build_repo.path}", "pull", "base",
                                base.ref], env=env)
            checksum = build_repo.rev_parse(f"base:{base.ref}") or ""
        build_repo.set_ref(f"base/{base.ref}", checksum)
        ctx.progress.info(f"base {base.ref} = {checksum[:12]}")
    return BaseCommit(checksum, False, f"{base.ref} {checksum[:12]} from {base.location}")


def _sample_inputs(ctx: Context) -> tuple[list[Path], str]:
    arch = ctx.target_arch
    rpms = rpms_for(sorted(ctx.layout.sample_base_rpms.glob("*.rpm")), arch)
    if not any(rpm.name.endswith(f".{arch}.rpm") for rpm in rpms):
        raise BuildError(f"no {arch} SAMPLE base RPMs in {ctx.layout.sample_base_rpms}",
                         hint=f"run `python -m builder sample-base --build-dir {ctx.build_dir}`")
    identity = hashlib.sha256(canonical_json({
        "rpms": {rpm.name: file_digest(rpm) for rpm in rpms},
        "epoch": ctx.release.source_date_epoch, "layout": SAMPLE_LAYOUT,
    })).hexdigest()
    return rpms, identity


def _sample_base(ctx: Context, build_repo: Repo, workdir: Path) -> BaseCommit:
    arch = ctx.target_arch
    ref = f"base/sample/{arch}"
    rpms, identity = _sample_inputs(ctx)
    existing = build_repo.rev_parse(ref)
    if existing and build_repo.metadata(existing, "microshift.base-inputs") == identity:
        ctx.progress.skipped("SAMPLE base commit", identity)
        return BaseCommit(existing, True, f"SAMPLE base {existing[:12]}")
    # The tree, its commit and an rpm database (2.4 MiB in all for 173 KiB of RPMs, measured).
    ensure_space(ctx.build_dir, 4 * sum(rpm.stat().st_size for rpm in rpms) + 3 * MiB,
                 "the SAMPLE base commit")
    with ctx.progress.step(f"SAMPLE base commit from {len(rpms)} stand-in RPMs"):
        tree = Path(tempfile.mkdtemp(prefix="sample-base-", dir=workdir))
        try:
            labelling = build_sample_tree(ctx, rpms, tree)
            checksum = build_repo.commit(
                tree, subject=f"SAMPLE base OS for MicroShift edge images ({arch})",
                timestamp=ctx.release.source_date_epoch, parent=None, bind_ref=ref,
                extra=commit_label_args(labelling, tree, tree.with_name(tree.name + "-policy")),
                metadata={"version": "9.2.sample", "microshift.sample": "true",
                          "microshift.base-inputs": identity, **labelling.metadata()})
        finally:
            shutil.rmtree(tree, ignore_errors=True)
            shutil.rmtree(tree.with_name(tree.name + "-policy"), ignore_errors=True)
        build_repo.set_ref(ref, checksum)
        ctx.progress.info(f"SAMPLE base {ref} = {checksum[:12]}")
    return BaseCommit(checksum, True, f"SAMPLE base {checksum[:12]}")


def build_sample_tree(ctx: Context, rpms: list[Path], tree: Path) -> Labelling:
    """Install the stand-ins into an empty root and give it the ostree commit layout;
    return how the policy it carries labels it."""
    db = tree / SAMPLE_DBPATH.lstrip("/")
    db.mkdir(parents=True)
    ctx.runner.run(["rpm", "--root", str(tree), "--dbpath", SAMPLE_DBPATH, "-i", "--noscripts",
                    "--notriggers", "--nosignature", "--ignorearch", *map(str, rpms)],
                   env=rpm_env(ctx.release.source_date_epoch))
    # The SAMPLE policy package ships its store with container-selinux's module loaded, as a
    # base has it after that package's %post: nothing to install, only to label.
    labelling = tree_labelling(tree)
    if labelling.warning:
        ctx.progress.info(f"SAMPLE base: {labelling.warning}")
    for kver in sorted((tree / "usr/lib/modules").glob("*")):
        if not (kver / "vmlinuz").is_file():
            raise BuildError(f"SAMPLE base: {kver} has no vmlinuz; ostree cannot deploy it")
    if not (tree / "usr/lib/os-release").is_file():
        raise BuildError("SAMPLE base: no /usr/lib/os-release (sample-release package missing?)")
    etc = tree / "etc"
    etc.mkdir(mode=0o755, exist_ok=True)
    if not (etc / "os-release").exists():
        os.symlink("../usr/lib/os-release", etc / "os-release")
    integration_layout(tree)
    var_to_tmpfiles(tree)
    clean_rpmdb(tree)
    etc_to_usr_etc(tree)
    return labelling


def integration_layout(tree: Path) -> None:
    """The ostree integration directories and symlinks of an edge commit's root (/home,
    /root, /opt, ... into /var; /ostree, /tmp into /sysroot), with the tmpfiles.d lines that
    make their /var targets at boot."""
    for name in INTEGRATION_DIRS:
        (tree / name).mkdir(mode=0o755, exist_ok=True)
    for name, target in INTEGRATION_LINKS.items():
        link = tree / name
        if link.is_dir() and not link.is_symlink():
            link.rmdir()  # only ever an empty directory from a filesystem package
        if not link.is_symlink():
            os.symlink(target, link)
    tmpfiles = tree / "usr/lib/tmpfiles.d"
    tmpfiles.mkdir(parents=True, exist_ok=True)
    (tmpfiles / "sample-ostree-integration.conf").write_text(INTEGRATION_TMPFILES)
