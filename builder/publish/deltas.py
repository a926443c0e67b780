"""Static deltas for the refs of a run, offline delta files for USB delivery, and what each
update costs.

For the head H of each ref this makes a static delta to H from each of the previous N
commits (N = release.yaml ostree.deltas_from, default 3) and from scratch (`--empty`), then
regenerates the summary (which also rewrites the delta indexes clients look deltas up in).
The report also says what each update from a previous commit changes
(builder/publish/changes.py).

- Every path of every ref of the run is made in one job (builder/publish/generate.py): with
  the builder's compiler (the default) each part is made once for all the paths, profiles
  and architectures that need it, and reused across runs from DIR/cache/delta-parts; with
  ostree's generator each path runs `static-delta generate` with knobs from
  builder/publish/delta_knobs.py. Either way within the machine's cores and the memory ceiling
  (default: half the machine's memory).
- Each path's offline file DIR/deltas/REF/FROM-TO.delta is then written from its delta
  (builder/publish/offline.py), not generated again.
- DIR/deltas/REF/index.json lists the offline files (from, to, size, sha256);
  report.json/report.txt say per path what a device downloads and how the delta was made;
  a run of several refs also writes DIR/deltas/matrix.json/matrix.txt
  (builder/publish/matrix.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from builder.context import Context
from builder.core.errors import BuildError
from builder.core.files import write_atomic
from builder.core.ostree import Repo, TreeFile, delta_dir
from builder.core.progress import human_bytes
from builder.core.signing import SigningKey, sign_detached, signature_epoch, stop_agent
from builder.publish.changes import changes_to
from builder.publish.delta_knobs import PathPlan, default_ceiling, machine_cores, plan_path
from builder.publish.encodings import delta_encodings
from builder.publish.generate import Generated, PathWork, generate_paths, run_parallel
from builder.publish.matrix import write_matrix
from builder.publish.offline import (
    INDEX,
    SUFFIX,
    OfflineDeltaError,
    OfflineFile,
    Superblock,
    index_json,
    offline_name,
    write_offline_file,
)
from builder.publish.report import (
    DeltaReport,
    LargeFile,
    UpdatePath,
    image_mode_cost,
    measure_update,
    read_superblock,
    report_dir,
)
from builder.publish.statement_signing import sign_timestamp
from builder.updater.freshness import (
    DEFAULT_VALIDITY_SECONDS,
    TIMESTAMP,
    TIMESTAMP_SIGNATURE,
    date_text,
)

LARGE_FILE = 1024 * 1024  # new files from this size on are listed with their encoding


@dataclass(frozen=True)
class DeltaOptions:
    from_count: int | None = None
    key: SigningKey | None = None
    offline: bool = True
    memory_limit: int | None = None  # bytes for all paths at once; None: half the memory
    jobs: int | None = None          # paths (ostree) or parts (builder) at once; None: cores
    scratch: bool = True             # also the delta from scratch (new devices, --empty)
    validity: int = DEFAULT_VALIDITY_SECONDS  # how long the index's statement is current
    generator: str = "builder"       # builder (builder/delta) or ostree (static-delta generate)
    cache_limit: int | None = None   # bytes of DIR/cache/delta-parts; None: 8 GiB


@dataclass(frozen=True)
class DeltaTarget:
    """One ref of a run, with the run narrowed to that ref's architecture."""

    ctx: Context
    ref: str


@dataclass(frozen=True)
class _Ref:
    target: DeltaTarget
    head: str
    previous: tuple[str, ...]
    new_files: tuple[TreeFile, ...]
    out_dir: Path


def generate_deltas(ctx: Context, ref: str, options: DeltaOptions | None = None
                    ) -> DeltaReport:
    """Generate, publish and measure the deltas to the ref's head (a library entry point)."""
    [report] = generate_matrix(ctx, [DeltaTarget(ctx, ref)], options or DeltaOptions())
    return report


def generate_matrix(ctx: Context, targets: Sequence[DeltaTarget],
                    options: DeltaOptions) -> list[DeltaReport]:
    """The deltas of every target ref in one job; one report per ref, in order."""
    repo = Repo(ctx.layout.ostree_repo, ctx.runner)
    if not repo.exists():
        raise BuildError(f"no ostree repository at {repo.path}",
                         hint="run `python -m builder compose` first")
    refs = [_history(repo, target, options) for target in targets]
    ceiling = options.memory_limit or default_ceiling()
    jobs = max(1, options.jobs or machine_cores())
    with ctx.progress.step(_title(refs, options)):
        started = time.monotonic()
        work = _work(ctx, repo, refs, options, ceiling)
        ctx.progress.info(f"{len(work)} paths with {options.generator}'s generator, up to "
                          f"{jobs} at once, memory ceiling {human_bytes(ceiling)}")
        generated = generate_paths(ctx, work, options.generator, jobs=jobs, ceiling=ceiling,
                                   cache_limit=options.cache_limit)
        by_ref = {ref.target.ref: ref for ref in refs}
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            finished = list(pool.map(
                lambda item: _finish(ctx, by_ref[item[0].ref], item[0], item[1],
                                     offline_file=options.offline, started=started),
                zip(work, generated, strict=True)))
        try:
            repo.summary_update(options.key)
        finally:
            if options.key is not None:
                stop_agent(ctx.runner, options.key.homedir)
        reports = [_publish(ref, repo, work, finished, options, started=started, jobs=jobs,
                            ceiling=ceiling) for ref in refs]
        if len(refs) > 1:
            write_matrix(ctx, reports, round(time.monotonic() - started, 2))
    return reports


def _title(refs: Sequence[_Ref], options: DeltaOptions) -> str:
    scratch = " and from scratch" if options.scratch else ""
    if len(refs) == 1:
        ref = refs[0]
        return (f"static deltas to {ref.target.ref} = {ref.head[:12]} from "
                f"{len(ref.previous)} previous commits{scratch}")
    return (f"static deltas to {len(refs)} refs from up to "
            f"{max(len(r.previous) for r in refs)} previous commits{scratch}")


def _history(repo: Repo, target: DeltaTarget, options: DeltaOptions) -> _Ref:
    ctx = target.ctx
    count = ctx.release.ostree.deltas_from if options.from_count is None else options.from_count
    history = repo.history(target.ref, count + 1)
    if not history:
        raise BuildError(f"{repo.path} has no ref {target.ref}", hint="compose the image first")
    out_dir = report_dir(ctx.build_dir, target.ref)
    out_dir.mkdir(parents=True, exist_ok=True)
    return _Ref(target, history[0], tuple(history[1:]), tuple(repo.files(history[0])), out_dir)


def _work(ctx: Context, repo: Repo, refs: Sequence[_Ref], options: DeltaOptions,
          ceiling: int) -> list[PathWork]:
    work = []
    listed: dict[str, list[TreeFile]] = {}
    for ref in refs:
        sources: list[str | None] = [*ref.previous, *([None] if options.scratch else [])]
        for source in sources:
            old = listed.setdefault(source, repo.files(source)) if source else []
            plan = plan_path(source, old, ref.new_files, ceiling)
            if options.generator == "ostree" and plan.memory_estimate > ceiling:
                ctx.progress.info(f"{(source or 'empty')[:12]}: estimated peak "
                                  f"{human_bytes(plan.memory_estimate)} is over the ceiling "
                                  "even without bsdiff; it runs alone")
            work.append(PathWork(repo, ref.target.ref, ref.head, plan))
    return work


def _finish(ctx: Context, ref: _Ref, path: PathWork, generated: Generated, *,
            offline_file: bool, started: float) -> tuple[UpdatePath, OfflineFile | None]:
    """One generated path: its offline file, how its large files travel, its sizes."""
    repo, head, plan = path.repo, path.head, path.plan
    source = plan.from_commit
    directory = delta_dir(repo.path, source, head)
    from_version = repo.metadata(source, "version") if source else None
    offline: OfflineFile | None = None
    if offline_file:
        offline = write_offline_file(directory, ref.out_dir / offline_name(source, head),
                                     from_version)
    superblock = read_superblock(repo, source, head)
    large = _large_files(directory, superblock, plan, ref.new_files) if source else ()
    measured_path = measure_update(repo, source, head, offline.file if offline else None)
    result = replace(measured_path, offline_bytes=offline.bytes if offline else None,
                     offline_sha256=offline.sha256 if offline else None,
                     generated=generated.generated, generation_seconds=generated.seconds,
                     peak_memory_bytes=generated.peak, knobs=generated.knobs or {},
                     pieces=generated.pieces, large_files=large,
                     path_seconds=round(time.monotonic() - started, 2))
    ctx.progress.info(f"{path.label}: {human_bytes(result.delta_bytes)} in {result.delta_parts} "
                      f"parts, {result.fallback_objects} fallback objects, {generated.how}",
                      path=path.label, bytes=result.delta_bytes)
    return result, offline


def _publish(ref: _Ref, repo: Repo, work: Sequence[PathWork],
             finished: Sequence[tuple[UpdatePath, OfflineFile | None]], options: DeltaOptions,
             *, started: float, jobs: int, ceiling: int) -> DeltaReport:
    """One ref's index (signed), report.json and report.txt."""
    ctx = ref.target.ctx
    mine = [done for path, done in zip(work, finished, strict=True)
            if path.ref == ref.target.ref]
    if options.offline:
        files = [offline for _, offline in mine if offline is not None]
        _write_index(ref.out_dir, ref.target.ref, ref.head, repo.metadata(ref.head, "version"),
                     files)
        _sign_index(ctx, ref.out_dir, ref.target.ref, options.key, options.validity)
    report = DeltaReport(ref.target.ref, ref.head, repo.metadata(ref.head, "version"),
                         str(repo.path), tuple(path for path, _ in mine),
                         round(time.monotonic() - started, 2), jobs, ceiling,
                         changes_to(repo, ref.head, list(ref.previous), ctx.progress.warn),
                         image_mode_cost(ctx.layout, ref.target.ref, ref.head))
    write_atomic(ref.out_dir / "report.json", report.to_json())
    write_atomic(ref.out_dir / "report.txt", report.text() + "\n")
    written = ref.out_dir / "report.json"
    ctx.progress.wrote(str(written), written.stat().st_size)
    return report


def _large_files(directory: Path, superblock: Superblock, plan: PathPlan,
                 new_files: Sequence[TreeFile]) -> tuple[LargeFile, ...]:
    encodings = delta_encodings(directory, superblock)
    pairs = {p.new.checksum: p.old for p in plan.pairs}
    listed: dict[str, LargeFile] = {}
    for new in new_files:
        if new.size < LARGE_FILE or new.checksum not in encodings or new.checksum in listed:
            continue
        old = pairs.get(new.checksum)
        listed[new.checksum] = LargeFile(new.path, new.size, old.path if old else None,
                                         old.size if old else None,
                                         encodings[new.checksum].kind)
    return tuple(sorted(listed.values(), key=lambda f: (-f.bytes, f.path)))


def _sign_index(ctx: Context, out_dir: Path, ref: str, key: SigningKey | None,
                validity: int) -> None:
    """index.json.sig: what devices' updaters believe the index by (builder/updater). The
    signature time is pinned like the RPMs' and repomd.xml's, so a rerun writes it again
    byte for byte; timestamp.json{,.sig}, the statement that it is current, is signed with
    the wall clock (builder/updater/freshness.py)."""
    signature = out_dir / (INDEX + ".sig")
    if key is None:
        for name in (signature.name, TIMESTAMP, TIMESTAMP_SIGNATURE):
            (out_dir / name).unlink(missing_ok=True)
        ctx.progress.warn(f"{out_dir / INDEX} is not signed (no --gpg-key): devices' "
                          "updaters refuse an unsigned index")
        return
    try:
        epoch = signature_epoch(ctx.runner, key, ctx.release.source_date_epoch)
        sign_detached(ctx.runner, key, out_dir / INDEX, epoch)
        stamp = sign_timestamp(ctx.runner, key, out_dir, ref, validity)
    finally:
        stop_agent(ctx.runner, key.homedir)
    ctx.progress.info(f"signed {out_dir / INDEX} with {key.key_id}, current until "
                      f"{date_text(stamp.expires)} ({TIMESTAMP})")


def _write_index(out_dir: Path, ref: str, head: str, version: str | None,
                 files: Sequence[OfflineFile]) -> None:
    write_atomic(out_dir / INDEX, index_json(ref, head, version, files))
    # Offline files to an older head are superseded: a USB stick gets the current set.
    keep = {f.file for f in files}
    for path in out_dir.glob(f"*{SUFFIX}"):
        if path.name not in keep:
            path.unlink()


__all__ = ["DeltaOptions", "DeltaReport", "OfflineDeltaError", "UpdatePath", "generate_deltas",
           "report_dir", "run_parallel"]
