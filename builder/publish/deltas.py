"""Static deltas for a ref, offline delta files for USB delivery, and what each update costs.

For the head H of a ref this makes a static delta to H from each of the previous N commits
(N = release.yaml ostree.deltas_from, default 3) and from scratch (`--empty`), then
regenerates the summary (which also rewrites the delta indexes clients look deltas up in).
The report also says what each update from a previous commit changes
(builder/publish/changes.py).

- Each path is generated once, into the repository, with knobs chosen from its files and
  the memory ceiling (builder/publish/plan.py); its offline file DIR/deltas/REF/FROM-TO.delta
  is then written from that delta (builder/publish/offline.py), not generated again.
- Paths run in parallel, up to the machine's cores and while their estimated peak memory
  fits the ceiling (default: half the machine's memory), longest first.
- DIR/deltas/REF/index.json lists the offline files (from, to, size, sha256);
  report.json/report.txt say per path what a device downloads and how the delta was made.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from builder.context import Context
from builder.core.errors import BuildError
from builder.core.files import write_atomic
from builder.core.ostree import Repo, TreeFile, delta_dir
from builder.core.progress import human_bytes
from builder.core.signing import SigningKey, sign_detached, signature_epoch, stop_agent
from builder.publish.changes import changes_to
from builder.publish.encodings import delta_encodings
from builder.publish.freshness import sign_timestamp
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
from builder.publish.plan import PathPlan, default_ceiling, machine_cores, plan_path, schedule
from builder.publish.report import (
    DeltaReport,
    LargeFile,
    UpdatePath,
    measure_update,
    read_superblock,
    report_dir,
)
from builder.updater.freshness import (
    DEFAULT_VALIDITY_SECONDS,
    TIMESTAMP,
    TIMESTAMP_SIGNATURE,
    date_text,
)

LARGE_FILE = 1024 * 1024  # new files from this size on are listed with their encoding
T = TypeVar("T")


@dataclass(frozen=True)
class DeltaOptions:
    ref: str | None = None
    image: str = "microshift-full"
    from_count: int | None = None
    key: SigningKey | None = None
    offline: bool = True
    memory_limit: int | None = None  # bytes for all paths at once; None: half the memory
    jobs: int | None = None          # paths at once; None: the machine's cores
    scratch: bool = True             # also the delta from scratch (new devices, --empty)
    validity: int = DEFAULT_VALIDITY_SECONDS  # how long the index's statement is current


def resolve_ref(ctx: Context, options: DeltaOptions) -> str:
    if options.ref:
        return options.ref
    from builder.blueprint.target import image_target

    return image_target(ctx, options.image).ref


def generate_deltas(ctx: Context, options: DeltaOptions | None = None) -> DeltaReport:
    """Generate, publish and measure the deltas to the ref's head (a library entry point)."""
    options = options or DeltaOptions()
    repo = Repo(ctx.path("ostree", "repo"), ctx.runner)
    if not repo.exists():
        raise BuildError(f"no ostree repository at {repo.path}",
                         hint="run `python -m builder compose` first")
    ref = resolve_ref(ctx, options)
    count = ctx.release.ostree.deltas_from if options.from_count is None else options.from_count
    history = repo.history(ref, count + 1)
    if not history:
        raise BuildError(f"{repo.path} has no ref {ref}", hint="compose the image first")
    head, previous = history[0], history[1:]
    out_dir = report_dir(ctx.build_dir, ref)
    out_dir.mkdir(parents=True, exist_ok=True)
    ceiling = options.memory_limit or default_ceiling()
    jobs = max(1, options.jobs or machine_cores())
    sources: list[str | None] = [*previous, *([None] if options.scratch else [])]
    scratch = " and from scratch" if options.scratch else ""
    with ctx.progress.step(f"static deltas to {ref} = {head[:12]} from "
                           f"{len(previous)} previous commits{scratch}"):
        started = time.monotonic()
        new_files = repo.files(head)
        plans = [plan_path(source, repo.files(source) if source else [], new_files, ceiling)
                 for source in sources]
        ctx.progress.info(f"up to {jobs} paths at once, memory ceiling {human_bytes(ceiling)}")
        for plan in plans:
            if plan.memory_estimate > ceiling:
                ctx.progress.info(f"{(plan.from_commit or 'empty')[:12]}: estimated peak "
                                  f"{human_bytes(plan.memory_estimate)} is over the ceiling "
                                  "even without bsdiff; it runs alone")
        target = _Target(repo, head, new_files, out_dir if options.offline else None)
        built = run_parallel(lambda plan: _build_path(ctx, target, plan), plans, jobs, ceiling)
        results = [built[id(plan)] for plan in plans]
        paths = tuple(path for path, _ in results)
        try:
            repo.summary_update(options.key)
        finally:
            if options.key is not None:
                stop_agent(ctx.runner, options.key.homedir)
        if options.offline:
            files = [offline for _, offline in results if offline is not None]
            _write_index(out_dir, ref, head, repo.metadata(head, "version"), files)
            _sign_index(ctx, out_dir, ref, options.key, options.validity)
        wall = time.monotonic() - started
    report = DeltaReport(ref, head, repo.metadata(head, "version"), str(repo.path), paths,
                         round(wall, 2), jobs, ceiling,
                         changes_to(repo, head, previous, ctx.progress.warn))
    write_atomic(out_dir / "report.json", report.to_json())
    write_atomic(out_dir / "report.txt", report.text() + "\n")
    ctx.progress.wrote(str(out_dir / "report.json"), (out_dir / "report.json").stat().st_size)
    return report


def run_parallel(work: Callable[[PathPlan], T], plans: Sequence[PathPlan], jobs: int,
                 ceiling: int) -> dict[int, T]:
    """work(plan) for every plan, longest first, at most `jobs` at once and, beyond the
    first, only while the running plans' memory estimates fit the ceiling. Keyed by id(plan)."""
    pending = schedule(plans)
    running: dict[Future[T], PathPlan] = {}
    results: dict[int, T] = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        while pending or running:
            while pending and len(running) < jobs:
                used = sum(p.memory_estimate for p in running.values())
                fit = next((p for p in pending if used + p.memory_estimate <= ceiling),
                           None if running else pending[0])
                if fit is None:
                    break
                pending.remove(fit)
                running[pool.submit(work, fit)] = fit
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                plan = running.pop(future)
                if future.exception() is not None:
                    pending.clear()  # let the running paths finish, start no new ones
                    for other in running:
                        other.cancel()
                    raise future.exception()  # type: ignore[misc]
                results[id(plan)] = future.result()
    return results


@dataclass(frozen=True)
class _Target:
    """What every update path to one head shares."""

    repo: Repo
    head: str
    new_files: Sequence[TreeFile]
    out_dir: Path | None  # None: no offline files


def _build_path(ctx: Context, target: _Target,
                plan: PathPlan) -> tuple[UpdatePath, OfflineFile | None]:
    """One update path: generate it (unless an exact one exists), write its offline file,
    read how its files are encoded, measure it."""
    started = time.monotonic()
    repo, head, out_dir = target.repo, target.head, target.out_dir
    source = plan.from_commit
    directory = delta_dir(repo.path, source, head)
    label = f"{(source or 'empty')[:12]} -> {head[:12]}"
    if (directory / "superblock").is_file() and read_superblock(repo, source, head).fallbacks:
        # An older delta with fallback entries (made before this code): never keep one.
        repo.delta_delete(source, head)
    generated = not (directory / "superblock").is_file()
    seconds = peak = None
    how = "kept the existing delta"
    if generated:
        ctx.progress.info(f"{label}: generating ({' '.join(plan.generate_args())}; estimated "
                          f"peak {human_bytes(plan.memory_estimate)})")
        measured = ctx.runner.measured(repo.delta_generate_argv(head, source,
                                                                plan.generate_args()))
        seconds, peak = round(measured.seconds, 2), measured.peak_rss
        how = f"generated in {seconds:.1f}s, peak {human_bytes(peak)}"
    superblock = read_superblock(repo, source, head)
    if superblock.fallbacks:
        raise BuildError(f"delta {label} has {len(superblock.fallbacks)} fallback objects "
                         "although it was generated with --min-fallback-size=0")
    from_version = repo.metadata(source, "version") if source else None
    offline: OfflineFile | None = None
    if out_dir is not None:
        offline = write_offline_file(directory, out_dir / offline_name(source, head),
                                     from_version)
    large = _large_files(directory, superblock, plan, target.new_files) if source else ()
    measured_path = measure_update(repo, source, head, offline.file if offline else None)
    result = replace(measured_path, offline_bytes=offline.bytes if offline else None,
                     offline_sha256=offline.sha256 if offline else None, generated=generated,
                     generation_seconds=seconds, peak_memory_bytes=peak, knobs=plan.to_json(),
                     large_files=large, path_seconds=round(time.monotonic() - started, 2))
    ctx.progress.info(f"{label}: {human_bytes(result.delta_bytes)} in {result.delta_parts} "
                      f"parts, {result.fallback_objects} fallback objects, {how}",
                      path=label, bytes=result.delta_bytes)
    return result, offline


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
