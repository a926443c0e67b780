"""Static deltas for many update paths at once, each part made once.

Every path (from-commit -> to-commit, or from scratch) is cut into parts
(builder/delta/layout.py). Parts are identified by what decides their bytes, so the same
part needed by several paths, profiles or releases is one piece of work: taken from the
cache (builder/delta/cache.py) when an earlier run made it, otherwise made once in this
run on a pool of `jobs` threads (bsdiff and xz run outside Python's lock), the costliest
first, starting another only while the estimated memory of those running fits the
ceiling. A path's delta is written (builder/delta/superblock.py) as soon as its last part
is ready.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from builder.core.ostree import Repo, TreeEntry
from builder.core.progress import Progress, human_bytes
from builder.core.runner import Runner
from builder.delta.cache import CachedPart, PartCache
from builder.delta.layout import Encoder, PartPlan, bsdiff_memory, plan_parts
from builder.delta.objects import ArchiveObjects
from builder.delta.parts import build_part
from builder.delta.superblock import remove_leftovers, write_delta

PROCESS_BASE = 64 << 20
XZ_MEMORY = 370 << 20          # liblzma's encoder at preset 8
BSDIFF_SECONDS_PER_MB = 0.25   # old + new, one core of this machine (for ordering only)
XZ_SECONDS_PER_MB = 0.5
REPORT_FROM = 4 << 20          # parts from this size on are reported when made


@dataclass(frozen=True)
class DeltaRequest:
    repo: Path
    from_commit: str | None  # None: from scratch
    to_commit: str


@dataclass(frozen=True)
class PathPieces:
    """How one delta's parts were come by."""

    parts: int
    cached: int         # taken from the cache: made by an earlier run or job
    made: int           # made in this run, first for this path
    shared: int         # made in this run for another path and used here too
    made_seconds: float  # seconds spent making the parts this path used that this run made
    objects: dict[str, int] = field(default_factory=dict)  # bsdiff / whole / metadata


@dataclass(frozen=True)
class CompiledDelta:
    request: DeltaRequest
    directory: Path
    pieces: PathPieces
    ready_seconds: float  # from the run's start until the delta was written


@dataclass(frozen=True)
class _Task:
    key: str
    plan: PartPlan
    objects: ArchiveObjects

    @property
    def memory(self) -> int:
        bsdiff = max((bsdiff_memory(i.source_size, i.size) for i in self.plan.items
                      if i.source), default=0)
        return max(bsdiff, PROCESS_BASE + XZ_MEMORY + 2 * self.plan.size)

    @property
    def cost(self) -> float:
        return sum((i.size + i.source_size) * BSDIFF_SECONDS_PER_MB if i.source
                   else i.size * XZ_SECONDS_PER_MB for i in self.plan.items) / 1e6


@dataclass
class _Made:
    cached: CachedPart
    seconds: float
    first_for: int  # index of the request that needed it first


def compile_deltas(requests: Sequence[DeltaRequest], runner: Runner, cache: PartCache,
                   progress: Progress, *, jobs: int, ceiling: int,
                   encoder: Encoder | None = None) -> list[CompiledDelta]:
    """Write the delta of every request into its repository; one result per request."""
    encoder = encoder or Encoder()
    started = time.monotonic()
    for repo in {request.repo for request in requests}:
        remove_leftovers(repo)
    plans = _plan(requests, runner, encoder, ceiling)
    keys = [[plan.key(encoder) for plan in path] for path in plans]
    repos = {request.repo: ArchiveObjects(request.repo) for request in requests}
    found: dict[str, CachedPart] = {}
    tasks: dict[str, tuple[_Task, int]] = {}
    for index, (request, path) in enumerate(zip(requests, plans, strict=True)):
        objects = repos[request.repo]
        for key, plan in zip(keys[index], path, strict=True):
            if key in found or key in tasks:
                continue
            cached = cache.get(key)
            if cached is not None:
                found[key] = cached
            else:
                tasks[key] = (_Task(key, plan, objects), index)
    progress.info(f"{len(requests)} delta paths need {len(found) + len(tasks)} distinct "
                  f"parts: {len(found)} in the cache, {len(tasks)} to make with up to {jobs} "
                  f"at once, memory ceiling {human_bytes(ceiling)}")
    written: dict[int, CompiledDelta] = {}

    def on_ready(made: dict[str, _Made]) -> None:
        for index, request in enumerate(requests):
            if index not in written and all(k in found or k in made for k in keys[index]):
                written[index] = _write(request, plans[index], keys[index], found, made,
                                        repo=repos[request.repo], index=index,
                                        ready=time.monotonic() - started)

    on_ready({})
    _make(tasks, cache, encoder, progress, jobs=jobs, ceiling=ceiling, on_ready=on_ready)
    dropped, freed = cache.trim()
    if dropped:
        progress.info(f"delta part cache: dropped {dropped} parts used longest ago "
                      f"({human_bytes(freed)}) to stay within {human_bytes(cache.limit)}")
    return [written[index] for index in range(len(requests))]


def _plan(requests: Sequence[DeltaRequest], runner: Runner, encoder: Encoder,
          ceiling: int) -> list[list[PartPlan]]:
    listed: dict[tuple[Path, str], list[TreeEntry]] = {}

    def entries(repo: Path, commit: str) -> list[TreeEntry]:
        if (repo, commit) not in listed:
            listed[repo, commit] = Repo(repo, runner).entries(commit)
        return listed[repo, commit]

    return [plan_parts(entries(r.repo, r.from_commit) if r.from_commit else [],
                       entries(r.repo, r.to_commit), encoder, ceiling) for r in requests]


def _make(tasks: dict[str, tuple[_Task, int]], cache: PartCache, encoder: Encoder,
          progress: Progress, *, jobs: int, ceiling: int,
          on_ready: Callable[[dict[str, _Made]], None]) -> None:
    """Make every task's part, costliest first, within `jobs` and the memory ceiling."""
    pending = sorted(tasks.values(), key=lambda t: t[0].cost, reverse=True)
    running: dict[Future[tuple[CachedPart, float]], tuple[_Task, int]] = {}
    made: dict[str, _Made] = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        while pending or running:
            while pending and len(running) < jobs:
                used = sum(task.memory for task, _ in running.values())
                fit = next((t for t in pending if used + t[0].memory <= ceiling),
                           None if running else pending[0])
                if fit is None:
                    break
                pending.remove(fit)
                running[pool.submit(_make_one, fit[0], cache, encoder, jobs)] = fit
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                task, first = running.pop(future)
                if future.exception() is not None:
                    pending.clear()  # let the running parts finish, start no new ones
                    raise future.exception()  # type: ignore[misc]
                cached, seconds = future.result()
                made[task.key] = _Made(cached, seconds, first)
                _report_made(progress, task, cached, seconds)
            on_ready(made)


def _make_one(task: _Task, cache: PartCache, encoder: Encoder,
              threads: int) -> tuple[CachedPart, float]:
    started = time.monotonic()
    built = build_part(task.objects, task.plan, encoder, threads)
    cached = cache.put(task.key, built.data, built.uncompressed)
    return cached, time.monotonic() - started


def _report_made(progress: Progress, task: _Task, cached: CachedPart, seconds: float) -> None:
    if task.plan.size < REPORT_FROM:
        return
    items = task.plan.items
    what = (f"{items[0].kind} {items[0].path}" if len(items) == 1
            else f"{len(items)} objects")
    progress.info(f"part made: {what}, {human_bytes(task.plan.size)} -> "
                  f"{human_bytes(cached.bytes)} in {seconds:.1f}s")


def _write(request: DeltaRequest, plans: list[PartPlan], keys: list[str],
           found: dict[str, CachedPart], made: dict[str, _Made], *, repo: ArchiveObjects,
           index: int, ready: float) -> CompiledDelta:
    parts = [(plan, found[key] if key in found else made[key].cached)
             for plan, key in zip(plans, keys, strict=True)]
    directory = write_delta(repo, request.from_commit, request.to_commit, parts)
    mine = {key for key in keys if key in made and made[key].first_for == index}
    others = {key for key in keys if key in made and made[key].first_for != index}
    objects: dict[str, int] = {}
    for plan in plans:
        for item in plan.items:
            objects[item.kind] = objects.get(item.kind, 0) + 1
    pieces = PathPieces(len(keys), len({k for k in keys if k in found}), len(mine), len(others),
                        round(sum(made[k].seconds for k in mine | others), 2), objects)
    return CompiledDelta(request, directory, pieces, round(ready, 2))
