"""The local compose: blueprint + lock file + base commit -> a signed ostree commit on a ref.

Repositories (all under DIR/ostree):
  repo/        archive mode, what is published over HTTP and what deltas are made in;
  build-repo/  bare mode, private: base commits and fresh compose commits. Checking a base
               out of it with hard links costs no copy, and committing the tree back with
               --link-checkout-speedup skips re-hashing untouched files.
  work/        scratch trees; anything here is stale once no compose holds the lock.

Crash safety: nothing in repo/ changes until the commit is complete in build-repo. Then
`pull-local` copies (and re-verifies) its objects into repo/ in one ostree transaction,
the commit is signed, and only then the ref moves (one atomic rename inside ostree) and the
summary is regenerated. Killed anywhere, repo/ passes `ostree fsck` with the ref at the old
commit (or already at the new one, whose objects are all present), and a rerun completes.
A rerun whose tree and version equal the ref's head changes nothing but the summary.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from builder.blueprint.target import ImageTarget
from builder.compose.base import BaseCommit, ensure_base
from builder.compose.containers import embed_images
from builder.compose.customizations import apply_customizations
from builder.compose.inputs import ComposeInputs, load_compose_inputs
from builder.compose.labels import Labelling, commit_label_args, install_policy_modules
from builder.compose.rootfs import (
    clean_rpmdb,
    etc_to_usr_etc,
    install_packages,
    package_files,
    usr_etc_to_etc,
    var_to_tmpfiles,
    verify_packages,
)
from builder.compose.units import apply_presets, preset_units, units_in
from builder.context import Context
from builder.core.diskspace import MiB, ensure_space
from builder.core.errors import BuildError
from builder.core.files import write_atomic
from builder.core.ostree import Repo, ostree_timestamp
from builder.core.signing import SigningKey, stop_agent
from builder.core.steps import builder_code_digest, canonical_json, file_digest

KILL_ENV = "MICROSHIFT_BUILDER_TEST_KILL_AT"
STAGES = ("base", "installed", "customized", "committed", "pulled", "signed", "ref-moved")


def no_checkpoint(stage: str) -> None:
    """Default checkpoint: nothing happens between stages."""


def kill_at(stage_to_kill: str) -> Callable[[str], None]:
    """A checkpoint that SIGKILLs this process at the named stage (crash-safety tests)."""
    if stage_to_kill not in STAGES:
        raise BuildError(f"{KILL_ENV}={stage_to_kill!r}: unknown stage; allowed: "
                         + ", ".join(STAGES))

    def checkpoint(stage: str) -> None:
        if stage == stage_to_kill:
            os.kill(os.getpid(), signal.SIGKILL)

    return checkpoint


@dataclass(frozen=True)
class ComposeOptions:
    key: SigningKey | None = None       # signs the commit and the summary
    auth_file: Path | None = None       # registry credentials for skopeo
    checkpoint: Callable[[str], None] = field(default=no_checkpoint)
    allow_older: bool = False           # a head dated after this release may be followed


@dataclass(frozen=True)
class ComposeResult:
    image: str
    ref: str
    commit: str
    parent: str | None
    changed: bool
    version: str
    seconds: float
    repo: Path


def ostree_dirs(ctx: Context) -> tuple[Repo, Repo]:
    """(published archive repo, private build repo)."""
    return (Repo(ctx.layout.ostree_repo, ctx.runner),
            Repo(ctx.layout.build_repo, ctx.runner))


@contextmanager
def compose_lock(ctx: Context) -> Iterator[Path]:
    """Hold DIR/ostree/.lock for the compose; yield a fresh work dir, stale ones removed."""
    top = ctx.layout.ostree
    top.mkdir(parents=True, exist_ok=True)
    with (top / ".lock").open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise BuildError(f"another compose is running in {top}",
                             hint="wait for it to finish") from exc
        work = top / "work"
        if work.exists():
            shutil.rmtree(work)  # left by a killed compose: nobody else holds the lock
        work.mkdir()
        old_umask = os.umask(0o022)  # modes of created files are part of the commit
        try:
            yield work
        finally:
            os.umask(old_umask)
            shutil.rmtree(work, ignore_errors=True)


@dataclass(frozen=True)
class _Job:
    """One compose: what it reads and where it writes."""

    ctx: Context
    inputs: ComposeInputs
    ref: str
    options: ComposeOptions
    archive: Repo
    build_repo: Repo
    work: Path
    explicit_ref: bool = False   # --ref: the admin chose the ref, another image's included


def compose_image(ctx: Context, target: ImageTarget,
                  options: ComposeOptions | None = None) -> ComposeResult:
    """Compose `target` (an image on the context's architecture, its ref resolved by the
    build plan) into DIR/ostree/repo."""
    options = options or ComposeOptions()
    image, ref = target.image, target.ref
    if os.geteuid() != 0:
        raise BuildError("compose must run as root: it installs RPMs with `rpm --root` and "
                         "records file ownership in the commit (osbuild runs as root too)",
                         hint="run it with sudo or in a root container")
    started = time.monotonic()
    release = ctx.release
    inputs = load_compose_inputs(ctx.build_dir, image, ctx.target_arch, release.evr)
    verify_packages(inputs.packages, inputs.lock_path)
    ensure_space(ctx.build_dir, compose_space(inputs), f"the compose of {image}")
    archive, build_repo = ostree_dirs(ctx)
    with ctx.progress.step(f"compose {image} {release.evr} -> {ref}"), \
            compose_lock(ctx) as work:
        job = _Job(ctx, inputs, ref, options, archive, build_repo, work, target.explicit_ref)
        archive.init("archive")
        build_repo.init("bare")
        parent = archive.rev_parse(ref)
        _check_same_image(job, parent)
        _check_not_older(job, parent)
        base = ensure_base(ctx, build_repo, work)
        options.checkpoint("base")
        inputs_now = compose_inputs(job, base)
        identity = compose_identity(inputs_now)
        if _already_composed(job, parent, identity):
            ctx.progress.skipped(f"compose {image} ({ctx.target_arch})", identity)
            changed = False
            _publish_summary(job)
        else:
            ctx.progress.info(f"composing: {_why_compose(job, parent, inputs_now)}")
            commit = _build_commit(job, base, parent)
            options.checkpoint("committed")
            changed = _publish(job, commit, parent)
            _record_inputs(job, archive.rev_parse(ref) or commit, inputs_now)
        # The orphan compose commit has been copied (or was not needed): keep only the bases.
        build_repo.prune_unreferenced()
    if not changed:
        assert parent is not None  # unchanged means the ref already held this content
        commit, parent = parent, archive.parent(parent)
    result = ComposeResult(image, ref, commit, parent, changed, release.evr,
                           time.monotonic() - started, archive.path)
    state = "new commit" if changed else "unchanged: the ref already holds this content"
    ctx.progress.info(f"{ref} = {commit} ({state}) in {archive.path}", ref=ref, commit=commit,
                      changed=changed)
    return result


def compose_space(inputs: ComposeInputs) -> int:
    """What a compose writes, at least: the installed tree (RPM payloads unpack to two or
    three times their compressed size), its commit in the bare build repo, the compressed
    copy in the published repo and the rpm database. Container images come on top; a disk
    that fills while they are copied is reported as such."""
    packed = sum(pkg.path.stat().st_size for pkg in inputs.packages if pkg.path.is_file())
    return 7 * packed + 4 * MiB


def _check_same_image(job: _Job, head: str | None) -> None:
    if head is None or job.explicit_ref:
        return
    previous = job.archive.metadata(head, "microshift.image")
    if previous is not None and previous != job.inputs.name:
        raise BuildError(f"ref {job.ref} holds {previous} commits; composing {job.inputs.name} "
                         "onto it would switch every device following it to another profile",
                         hint="give each image its own ref (release.yaml ostree.ref with "
                              "{image}), or pass --ref explicitly to do it on purpose")


def _check_not_older(job: _Job, head: str | None) -> None:
    """Devices refuse a commit dated before the one they run (microshift-update, and `ostree
    pull --timestamp-check`): composed onto a newer head, a release would become the ref's
    head that no device takes, and a newer release composed later would count it as its
    parent."""
    if head is None or job.options.allow_older:
        return
    release = job.ctx.release
    head_time = job.archive.timestamp(head)
    if release.source_date_epoch < head_time:
        head_version = job.archive.metadata(head, "version") or head[:12]
        raise BuildError(f"ref {job.ref} holds {head_version} dated {ostree_timestamp(head_time)}; "
                         f"release {release.evr} is dated "
                         f"{ostree_timestamp(release.source_date_epoch)} (source_date_epoch), "
                         "older: devices would refuse it as a downgrade",
                         hint="to roll back on purpose, release the old content with a later "
                              "source_date_epoch, or pass --allow-older for devices set to "
                              "allow_downgrade: true")


def _prepare_tree(job: _Job, tree: Path, base: BaseCommit) -> Labelling:
    ctx, inputs, release = job.ctx, job.inputs, job.ctx.release
    usr_etc_to_etc(tree)
    installed = install_packages(ctx.runner, tree, inputs.packages, release.source_date_epoch)
    ctx.progress.info(f"installed {len(installed)} of {len(inputs.packages)} locked packages "
                      f"({len(inputs.packages) - len(installed)} already in the base)")
    job.options.checkpoint("installed")
    files = package_files(ctx.runner, [pkg.path for pkg in installed])
    labelling = install_policy_modules(ctx, tree, files)
    if labelling.warning:
        ctx.progress.warn(labelling.warning)
    preset = apply_presets(tree, units_in(files) + preset_units(tree, files))
    ctx.progress.info(f"presets enabled: {', '.join(preset) or 'none'}")
    images = embed_images(ctx.runner, tree, inputs.containers, release.images(),
                          arch=ctx.target_arch, epoch=release.source_date_epoch,
                          workdir=job.work, auth_file=job.options.auth_file,
                          release_file=str(release.path))
    ctx.progress.info(f"embedded {len(images)} {ctx.target_arch} container images in "
                      "/usr/share/containers/storage")
    applied = apply_customizations(tree, inputs.customizations, lenient_units=base.is_sample)
    if applied.skipped_units:
        ctx.progress.info("SAMPLE base has no unit file for "
                          f"{', '.join(applied.skipped_units)}: not enabled")
    ctx.progress.info(f"customizations: {len(applied.files)} files, services enabled "
                      f"{', '.join(applied.enabled) or 'none'}, firewall zones "
                      f"{', '.join(applied.zones) or 'none'}")
    job.options.checkpoint("customized")
    autovar = var_to_tmpfiles(tree)
    if autovar:
        ctx.progress.info(f"/var content turned into {len(autovar)} tmpfiles.d lines")
    clean_rpmdb(tree)
    etc_to_usr_etc(tree)
    return labelling


def _commit(job: _Job, tree: Path, base: BaseCommit, parent: str | None,
            labelling: Labelling) -> str:
    release = job.ctx.release
    sample = " (SAMPLE base)" if base.is_sample else ""
    # Every file is labelled from the image's own policy, as rpm-ostree does for edge commits.
    extra = ["--link-checkout-speedup",
             *commit_label_args(labelling, tree, job.work / "selinux-policy-root")]
    how = f"SELinux policy {labelling.policy}" if labelling.policy else "unlabelled"
    with job.ctx.progress.step(f"ostree commit ({how})"):
        return job.build_repo.commit(
            tree, subject=f"MicroShift {release.evr} {job.inputs.name}{sample}",
            timestamp=release.source_date_epoch, parent=parent, bind_ref=job.ref, extra=extra,
            metadata={"version": release.evr, "microshift.image": job.inputs.name,
                      "microshift.blueprint-version": job.inputs.version,
                      "microshift.base": base.checksum,
                      "microshift.sample-base": "true" if base.is_sample else "false",
                      **labelling.metadata()})


def _build_commit(job: _Job, base: BaseCommit, parent: str | None) -> str:
    tree = job.work / "tree"
    with job.ctx.progress.step("tree: install packages, units, images, customizations"):
        job.build_repo.checkout(base.checksum, tree, hardlinks=False, user_mode=False)
        labelling = _prepare_tree(job, tree, base)
    return _commit(job, tree, base, parent, labelling)


def compose_inputs(job: _Job, base: BaseCommit, code: str | None = None) -> dict[str, object]:
    """What a compose's commit is made of, by name: the blueprint, the lock (every RPM's
    sha256), the base commit, the release's version, epoch and architecture, the ref and the
    builder's code (`code`: its digest; default the running builder's). Images are pinned by
    digest in the blueprint."""
    release = job.ctx.release
    return {"blueprint": file_digest(job.inputs.blueprint_path),
            "lock": file_digest(job.inputs.lock_path), "base": base.checksum,
            "release": release.evr, "epoch": release.source_date_epoch,
            "arch": job.ctx.target_arch, "ref": job.ref,
            "builder": code if code is not None else builder_code_digest()}


def compose_identity(inputs: dict[str, object]) -> str:
    return hashlib.sha256(canonical_json(inputs)).hexdigest()


@dataclass(frozen=True)
class _Record:
    """DIR/ostree/compose-inputs/REF.json: the commit the last compose onto REF made, and
    from what."""

    commit: str
    identity: str
    inputs: dict[str, object]


def _inputs_record(job: _Job) -> Path:
    # Beside the repository, not in the commit: the commit stays a function of its content.
    return job.ctx.layout.compose_inputs(job.ref)


def _composed_inputs(job: _Job) -> _Record | None:
    """What the last compose onto the ref recorded, if readable."""
    try:
        record = json.loads(_inputs_record(job).read_text())
        return _Record(str(record["commit"]), str(record["identity"]), dict(record["inputs"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _already_composed(job: _Job, head: str | None, identity: str) -> bool:
    """Whether the ref's head is what the last compose of these very inputs made."""
    record = _composed_inputs(job)
    return head is not None and record is not None and \
        (record.commit, record.identity) == (head, identity)


def _why_compose(job: _Job, head: str | None, inputs: dict[str, object]) -> str:
    """Why this compose runs, for the log: which inputs changed since the recorded one."""
    record = _composed_inputs(job)
    if head is None:
        return f"{job.ref} has no commit yet"
    if record is None:
        return f"no record of what {job.ref}'s head was composed from"
    if record.commit != head:
        return f"{job.ref} has moved since the compose recorded in {_inputs_record(job)}"
    changed = [name for name, value in inputs.items() if record.inputs.get(name) != value]
    return "changed since the last compose: " + ", ".join(changed)


def _record_inputs(job: _Job, commit: str, inputs: dict[str, object]) -> None:
    record = {"commit": commit, "identity": compose_identity(inputs), "inputs": inputs}
    write_atomic(_inputs_record(job), canonical_json(record) + b"\n")


def _publish_summary(job: _Job) -> None:
    """A compose that changed nothing still refreshes the summary: a compose killed after
    moving the ref left it stale."""
    try:
        job.archive.summary_update(job.options.key)
    finally:
        if job.options.key is not None:
            stop_agent(job.ctx.runner, job.options.key.homedir)


def _publish(job: _Job, commit: str, parent: str | None) -> bool:
    """Copy the commit into the archive repo, sign it, move the ref, update the summary."""
    try:
        return _publish_commit(job, commit, parent)
    finally:
        if job.options.key is not None:
            stop_agent(job.ctx.runner, job.options.key.homedir)


def _publish_commit(job: _Job, commit: str, parent: str | None) -> bool:
    archive, options = job.archive, job.options
    with job.ctx.progress.step(f"publish to {archive.path}"):
        unchanged = parent is not None and (
            job.build_repo.content_checksum(commit) == archive.content_checksum(parent)
            and archive.metadata(parent, "version") == job.ctx.release.evr)
        if not unchanged:
            archive.pull_local(job.build_repo.path, commit)
            options.checkpoint("pulled")
            if options.key is not None:
                archive.gpg_sign(commit, options.key)
            options.checkpoint("signed")
            archive.set_ref(job.ref, commit)
            options.checkpoint("ref-moved")
        archive.summary_update(options.key)
    return not unchanged
