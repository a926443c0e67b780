"""`publish`: upload the ostree repository, and the SBOMs and update reports beside it, in an
order that never shows a device a ref before its objects.

At the target (a local directory, an rsync destination `[user@]host:path` or `rsync://...`,
or `s3://bucket/prefix` through the aws CLI):

    repo/                           the ostree repository: a device's remote URL is .../repo
    sbom/REF/COMMIT.spdx.json       the SBOM of each published commit (kept for old commits)
    updates/REF/report.{json,txt}   the update report of each ref's head: delta sizes and
                                    what changed
    updates/REF/index.json{,.sig}   the signed index of the delta files to the head, and the
    updates/REF/FROM-TO.delta       files: what devices' microshift-update downloads
    updates/REF/image/              the same for image-mode devices, when the release has a
                                    pushed bootc image (builder/publish/image_updates.py)

The upload runs in three phases, in reverse order of what points to what (as
ostree-releng-scripts' rsync-repos does):
  1. objects  objects/ and deltas/: content-addressed, so files already at the target are
              skipped, and nothing is deleted (devices may be mid-pull of older commits);
              detached commit metadata (signatures, *.commitmeta) is left to phase 2
  2. metadata config, *.commitmeta, delta-indexes/, and sbom/ + updates/ (but the
              update indexes)
  3. refs     refs/, then summary, then summary.sig (rsync --delay-updates puts them in
              place together), then the update indexes, which name the new commits.
              summary before summary.sig: clients cache the summary keyed by its
              signature, so a client that meets the new summary with the old signature
              keeps using its cached (old, consistent) summary. A changed summary is dated
              after the published one (clients ask with If-Modified-Since).
A publish interrupted anywhere leaves the target serving the old refs, all of whose objects
are there; running it again completes it.

Several build directories (one per image and architecture of a CI matrix) are merged first:
their refs are pulled into DIR/ostree/repo (`ostree pull-local`, re-verified), their deltas
copied, and the summary regenerated (and signed) over all refs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from builder.context import Context
from builder.core.build_layout import Layout
from builder.core.errors import BuildError, InputError
from builder.core.ostree import Repo, signed_by
from builder.core.signing import SigningKey, export_public_key, stop_agent
from builder.publish.image_updates import stage_images
from builder.publish.offline import INDEX, SUFFIX
from builder.publish.rollout_statement import (
    RolloutPlan,
    index_head,
    local_site,
    read_statement,
    resign,
    statements_lock,
)
from builder.publish.sbom import described_commit
from builder.publish.statement_signing import staged_refs, stale_statements
from builder.updater.freshness import (
    DEFAULT_VALIDITY_SECONDS,
    TIMESTAMP,
    TIMESTAMP_SIGNATURE,
    date_text,
)
from builder.updater.waves import Rollout

PHASES = ("objects", "metadata", "refs")
UPDATE_INDEX = (INDEX, INDEX + ".sig", TIMESTAMP, TIMESTAMP_SIGNATURE)
RSYNC = ["rsync", "-rlpt", "--mkpath"]
AWS_QUIET = ["--no-progress", "--only-show-errors"]


def no_checkpoint(phase: str) -> None:
    """Default: nothing happens between phases (tests interrupt a publish here)."""


@dataclass(frozen=True)
class PublishOptions:
    target: str
    merge: tuple[Path, ...] = ()          # other build directories to publish with this one
    key: SigningKey | None = None         # signs the regenerated summary after a merge
                                          # and the indexes' statements (freshness)
    validity: int = DEFAULT_VALIDITY_SECONDS
    checkpoint: Callable[[str], None] = field(default=no_checkpoint)
    rollout: RolloutPlan | None = None    # starts a rollout of each ref's new head
    rollouts_from: Path | None = None     # where the rollout commands keep the statements
                                          # (default: the target, when it is a directory)


@dataclass(frozen=True)
class PublishResult:
    target: str
    refs: dict[str, str]                  # ref -> commit, as published
    sboms: int
    reports: int


def publish(ctx: Context, options: PublishOptions) -> PublishResult:
    repo = Repo(ctx.layout.ostree_repo, ctx.runner)
    sources = [ctx.build_dir, *(path.resolve() for path in options.merge)]
    with ctx.progress.step(f"publish to {options.target}"):
        if options.merge:
            merge_builds(ctx, repo, options.merge, options.key)
        if not repo.exists() or not repo.refs():
            raise BuildError(f"{repo.path} has no refs to publish",
                             hint="compose an image first, or --merge the build directories "
                                  "of the CI's build jobs")
        refs = {ref: str(repo.rev_parse(ref)) for ref in repo.refs()}
        with tempfile.TemporaryDirectory(prefix="publish-") as scratch:
            if options.key is not None:
                check_signatures(ctx, repo, refs, options.key, Path(scratch) / "key.asc")
            extras = Path(scratch) / "extras"
            extras.mkdir()   # rsync needs it, also for a build with nothing beside the repo
            sboms = stage_sboms(sources, extras / "sbom", refs)
            reports = stage_reports(sources, extras / "updates")
            stage_images(ctx, sources, extras / "updates", options.key)
            if not options.target.startswith("s3://"):  # S3 dates each upload itself
                stamp_summary(ctx, repo.path, options.target, Path(scratch) / "published")
            site = options.rollouts_from or local_site(options.target)
            for phase, commands in plan(options.target, repo.path, extras):
                with ctx.progress.step(f"upload {phase}"), _lock(site, phase == "refs"):
                    if phase == "refs":
                        # Signed just before they go up, under the lock the rollout commands
                        # hold: a halt that lands meanwhile is carried, never overwritten.
                        _refresh_statements(ctx, extras / "updates", options, site)
                    for argv in commands:
                        ctx.runner.run(argv)
                options.checkpoint(phase)
        for ref, commit in refs.items():
            ctx.progress.info(f"published {ref} = {commit}", ref=ref, commit=commit)
    return PublishResult(options.target, refs, sboms, reports)


def _lock(site: Path | None, wanted: bool) -> contextlib.AbstractContextManager[None]:
    return statements_lock(site) if site is not None and wanted else contextlib.nullcontext()


def _refresh_statements(ctx: Context, updates: Path, options: PublishOptions,
                        site: Path | None) -> None:
    """Every published index gets a statement signed now (builder/updater/freshness.py):
    devices refuse an index whose statement expired, so a replayed old one cannot freeze
    them. A rollout of the same head that runs at the site goes on in it; a new head starts
    the rollout of `options.rollout` in the very statement that first names it."""
    try:
        for ref, ref_dir in staged_refs(updates):
            published = read_statement(site / "updates" / ref) if site else None
            running = published.rollout if published else None
            head = index_head(ref_dir)
            if running is not None and running.commit != head:
                running = None   # the rollout of an older head: done with
            rollout = running or (options.rollout.start(ref, head, int(time.time()))
                                  if options.rollout else None)
            if options.key is None:
                if running is not None and site is not None:
                    # The build's statement predates the rollout: keep the site's.
                    _keep_published(site / "updates" / ref, ref_dir)
                continue
            stamp = resign(ctx.runner, options.key, ref_dir, ref, validity=options.validity,
                           rollout=rollout)
            ctx.progress.info(f"updates/{stamp.ref}: index current until "
                              f"{date_text(stamp.expires)}" + _rollout_text(rollout, running))
    finally:
        if options.key is not None:
            stop_agent(ctx.runner, options.key.homedir)
    if options.key is None:
        for ref in stale_statements(updates, time.time()):
            ctx.progress.warn(f"updates/{ref}: the index's signed statement is missing or "
                              "ends within a day, and devices refuse it after that: publish "
                              "with --gpg-key to sign a fresh one")


def _rollout_text(rollout: Rollout | None, running: Rollout | None) -> str:
    if rollout is None:
        return ""
    return (f"; rollout {rollout.id} {rollout.state}, {rollout.open_count} of "
            f"{len(rollout.waves)} waves open"
            + (" (goes on)" if running is not None else " (started)"))


def _keep_published(published: Path, ref_dir: Path) -> None:
    for name in (TIMESTAMP, TIMESTAMP_SIGNATURE):
        (ref_dir / name).unlink(missing_ok=True)
        if (published / name).is_file():
            shutil.copy2(published / name, ref_dir / name)


def stamp_summary(ctx: Context, repo: Path, target: str, scratch: Path) -> None:
    """Date a new summary after the published one.

    ostree (2022.7) asks for summary.sig and summary with If-Modified-Since, and a web
    server answers 304 Not Modified when the file is not newer, to the second, than the
    device's copy. Uploaded with the build's own mtime (rsync -t), a summary made before
    the published one, or within the same second, would leave devices on the old commits
    until the next release. An unchanged summary keeps the published date, so publishing
    again changes nothing."""
    published = _published_signature(ctx, target, scratch)
    ours = repo / "summary.sig"
    if not ours.is_file():
        return
    if published is None:
        stamp = int(time.time())
    elif published.read_bytes() == ours.read_bytes():
        stamp = int(published.stat().st_mtime)
    else:
        stamp = max(int(time.time()), int(published.stat().st_mtime) + 1)
    for name in ("summary", "summary.sig"):
        os.utime(repo / name, (stamp, stamp))


def _published_signature(ctx: Context, target: str, scratch: Path) -> Path | None:
    """The target's repo/summary.sig, copied with its date, or None when it has none."""
    scratch.mkdir(parents=True, exist_ok=True)
    # rsync writes a file under its name only when complete; a failure copies nothing.
    ctx.runner.run([*RSYNC, f"{target}/repo/summary.sig", f"{scratch}/"], check=False)
    copied = scratch / "summary.sig"
    return copied if copied.is_file() else None


def check_signatures(ctx: Context, repo: Repo, refs: dict[str, str], key: SigningKey,
                     public: Path) -> None:
    """Every commit to publish verifies with the key, as devices will check it: a build job
    that ran without the secret must not reach the fleet."""
    export_public_key(ctx.runner, key, public)
    stop_agent(ctx.runner, key.homedir)
    for ref, commit in refs.items():
        if not signed_by(ctx.runner, repo.path, ref, public):
            raise BuildError(f"{ref} = {commit[:12]} is not signed by {key.key_id}: devices "
                             "trusting that key would refuse it",
                             hint="build with the release key (--gpg-homedir/--gpg-key), or "
                                  "publish with the key the commits were signed with")
    ctx.progress.info(f"all {len(refs)} refs verify with {key.key_id}")


# --- merging the build directories of a CI matrix ---------------------------------------
def merge_builds(ctx: Context, repo: Repo, builds: Iterable[Path], key: SigningKey | None) -> None:
    repo.init("archive")
    owners: dict[str, tuple[str, Path]] = {}
    for build in builds:
        other = Repo(Layout(build).ostree_repo, ctx.runner)
        if not other.exists():
            raise InputError(str(build), "", "has no ostree/repo: not a build directory "
                             "with a composed image")
        for ref in other.refs():
            commit = str(other.rev_parse(ref))
            if ref in owners and owners[ref][0] != commit:
                raise BuildError(f"ref {ref} is {owners[ref][0][:12]} in {owners[ref][1]} but "
                                 f"{commit[:12]} in {build}: two builds of one image",
                                 hint="merge one build directory per image and architecture")
            owners[ref] = (commit, build)
            # --depth=-1: the history too, which the deltas start from.
            repo.pull_local(other.path, ref, depth=-1)
        _copy_missing(other.path / "deltas", repo.path / "deltas")
        ctx.progress.info(f"merged {', '.join(other.refs())} from {build}")
    try:
        repo.summary_update(key)
    finally:
        if key is not None:
            stop_agent(ctx.runner, key.homedir)


def _copy_missing(source: Path, dest: Path) -> None:
    """Static deltas are named by their commits: one already here is the same delta."""
    if not source.is_dir():
        return
    for path in sorted(source.rglob("*")):
        target = dest / path.relative_to(source)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


# --- what goes beside the repository ----------------------------------------------------
def stage_sboms(builds: Iterable[Path], dest: Path, refs: dict[str, str]) -> int:
    """sbom/REF/COMMIT.spdx.json for every SBOM that describes a commit being published."""
    count = 0
    for build in builds:
        for path in sorted(Layout(build).sboms.glob("*.spdx.json")):
            described = described_commit(path)
            if described is None or refs.get(described[0]) is None:
                continue
            ref, commit = described
            target = dest / ref / f"{commit}.spdx.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            count += 1
    return count


def stage_reports(builds: Iterable[Path], dest: Path) -> int:
    """updates/REF/ from each build's DIR/deltas/REF/: report.{json,txt}, and what devices'
    updaters fetch (builder/updater): index.json, index.json.sig and the delta files."""
    count = 0
    for build in builds:
        deltas = Layout(build).deltas
        for report in sorted(deltas.rglob("report.json")) if deltas.is_dir() else []:
            ref_dir = report.parent.relative_to(deltas)
            names = ["report.json", "report.txt", *UPDATE_INDEX,
                     *sorted(p.name for p in report.parent.glob(f"*{SUFFIX}"))]
            for name in names:
                if (report.parent / name).is_file():
                    _link_or_copy(report.parent / name, dest / ref_dir / name)
            count += 1
    return count


def _link_or_copy(source: Path, target: Path) -> None:
    """Delta files are large: a hard link stages them without a copy where it can."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


# --- the upload, phase by phase ---------------------------------------------------------
def plan(target: str, repo: Path, extras: Path) -> list[tuple[str, list[list[str]]]]:
    """The commands of each phase, in order, for the target's kind."""
    if target.startswith("s3://"):
        return _s3_plan(target.rstrip("/"), repo, extras)
    if not target:
        raise InputError("command line", "--to", "must name a directory, an rsync "
                         "destination or s3://bucket/prefix")
    return _rsync_plan(target.rstrip("/") or "/", repo, extras)


def _rsync_plan(target: str, repo: Path, extras: Path) -> list[tuple[str, list[list[str]]]]:
    def into_repo(*rules: str, extra: tuple[str, ...] = ()) -> list[str]:
        filters = [f"--{rule}" for rule in rules]
        return [*RSYNC, *extra, *filters, "--exclude=*", f"{repo}/", f"{target}/repo/"]

    return [
        ("objects", [into_repo("exclude=*.commitmeta", "include=/objects/***",
                               "include=/deltas/***", extra=("--ignore-existing",))]),
        ("metadata", [into_repo("include=/config", "include=/objects/", "include=/objects/*/",
                                "include=/objects/*/*.commitmeta",
                                "include=/delta-indexes/***"),
                      [*RSYNC, *(f"--exclude={name}" for name in UPDATE_INDEX), f"{extras}/",
                       f"{target}/"]]),
        # The update indexes name delta files and commits: they go with the refs, last.
        ("refs", [into_repo("include=/refs/***", "include=/summary", "include=/summary.sig",
                            extra=("--delay-updates",)),
                  [*RSYNC, "--delay-updates", "--include=*/",
                   *(f"--include={name}" for name in UPDATE_INDEX), "--exclude=*",
                   f"{extras}/", f"{target}/"]]),
    ]


def _s3_plan(target: str, repo: Path, extras: Path) -> list[tuple[str, list[list[str]]]]:
    def sync(source: Path, dest: str, *filters: str) -> list[list[str]]:
        if not source.is_dir():
            return []
        return [["aws", "s3", "sync", *AWS_QUIET, *filters, str(source), f"{target}/{dest}"]]

    def copy(source: Path, dest: str) -> list[list[str]]:
        if not source.is_file():
            return []
        return [["aws", "s3", "cp", *AWS_QUIET, str(source), f"{target}/{dest}"]]

    return [
        ("objects", [*sync(repo / "objects", "repo/objects", "--size-only", "--exclude",
                           "*.commitmeta"),
                     *sync(repo / "deltas", "repo/deltas", "--size-only")]),
        ("metadata", [*copy(repo / "config", "repo/config"),
                      *sync(repo / "objects", "repo/objects", "--exclude", "*", "--include",
                            "*.commitmeta"),
                      *sync(repo / "delta-indexes", "repo/delta-indexes"),
                      *sync(extras, "", "--exclude", "*/index.json*", "--exclude",
                            "*/timestamp.json*")]),
        ("refs", [*sync(repo / "refs", "repo/refs"),
                  *copy(repo / "summary", "repo/summary"),
                  *copy(repo / "summary.sig", "repo/summary.sig"),
                  *sync(extras, "", "--exclude", "*", "--include", "*/index.json*",
                             "--include", "*/timestamp.json*")]),
    ]
