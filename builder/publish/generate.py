"""Making the deltas of many update paths: with the builder's compiler, or ostree's own.

- `builder` (the default): builder/delta compiles every path that needs a delta at once,
  each part made once across all of them and reused from DIR/cache/delta-parts
  (builder/delta/compiler.py). bsdiff for every modified file, on the machine's cores.
- `ostree`: `ostree static-delta generate` per path with the knobs of
  builder/publish/delta_knobs.py, paths in parallel within the cores and the memory ceiling. Kept
  as the reference the builder's deltas are measured against (tests, benchmarks).
An exact delta already in the repository is kept either way; one with fallback entries
(made before this code, or by ostree's defaults) is made again.
"""

from __future__ import annotations

import resource
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from builder.context import Context
from builder.core.errors import BuildError
from builder.core.ostree import Repo, delta_dir
from builder.core.progress import human_bytes
from builder.delta.cache import DEFAULT_LIMIT, PartCache
from builder.delta.compiler import DeltaRequest, compile_deltas
from builder.delta.layout import Encoder
from builder.publish.delta_knobs import PathPlan, schedule
from builder.publish.report import read_superblock

GENERATORS = ("builder", "ostree")
T = TypeVar("T")


@dataclass(frozen=True)
class PathWork:
    """One update path to make: to `head` of `ref`, from plan.from_commit."""

    repo: Repo
    ref: str
    head: str
    plan: PathPlan

    @property
    def label(self) -> str:
        return f"{(self.plan.from_commit or 'empty')[:12]} -> {self.head[:12]}"


@dataclass(frozen=True)
class Generated:
    """How one path's delta came to be."""

    generated: bool                  # False: an exact delta was in the repository
    seconds: float | None = None     # ostree: its run; builder: making the parts it used
    peak: int | None = None          # peak memory of the process that made it
    how: str = "kept the existing delta"
    knobs: dict[str, object] | None = None
    pieces: dict[str, Any] | None = None  # builder: parts taken from the cache or made


def part_cache(ctx: Context, limit: int | None = None) -> PartCache:
    return PartCache(ctx.layout.cache("delta-parts"), limit or DEFAULT_LIMIT)


def generate_paths(ctx: Context, work: Sequence[PathWork], generator: str, *, jobs: int,
                   ceiling: int, cache_limit: int | None = None) -> list[Generated]:
    """Make the delta of every path that lacks one; one result per path, in order."""
    if generator not in GENERATORS:
        raise BuildError(f"unknown delta generator {generator!r}",
                         hint=f"choose one of {', '.join(GENERATORS)}")
    missing = []
    for path in work:
        directory = delta_dir(path.repo.path, path.plan.from_commit, path.head)
        if (directory / "superblock").is_file() and read_superblock(
                path.repo, path.plan.from_commit, path.head).fallbacks:
            # An older delta with fallback entries (made before this code): never keep one.
            path.repo.delta_delete(path.plan.from_commit, path.head)
        if not (directory / "superblock").is_file():
            missing.append(path)
    if generator == "ostree":
        by_plan = {id(p.plan): p for p in missing}
        made = run_parallel(lambda plan: _ostree(ctx, by_plan[id(plan)]),
                            [p.plan for p in missing], jobs, ceiling)
        by_path = {id(p): made[id(p.plan)] for p in missing}
    else:
        by_path = _builder(ctx, missing, jobs, ceiling, cache_limit)
    results = [by_path.get(id(path), Generated(False)) for path in work]
    for path in work:
        superblock = read_superblock(path.repo, path.plan.from_commit, path.head)
        if superblock.fallbacks:
            raise BuildError(f"delta {path.label} has {len(superblock.fallbacks)} fallback "
                             "objects although it was generated with --min-fallback-size=0")
    return results


def _ostree(ctx: Context, path: PathWork) -> Generated:
    plan = path.plan
    ctx.progress.info(f"{path.label}: generating ({' '.join(plan.generate_args())}; estimated "
                      f"peak {human_bytes(plan.memory_estimate)})")
    measured = ctx.runner.measured(path.repo.delta_generate_argv(path.head, plan.from_commit,
                                                                 plan.generate_args()))
    seconds = round(measured.seconds, 2)
    return Generated(True, seconds, measured.peak_rss,
                     f"generated in {seconds:.1f}s, peak {human_bytes(measured.peak_rss)}",
                     {"generator": "ostree", **plan.to_json()})


def _builder(ctx: Context, missing: Sequence[PathWork], jobs: int, ceiling: int,
             cache_limit: int | None) -> dict[int, Generated]:
    # Two refs whose histories hold the same commits need the same delta: made once.
    unique = list({(p.plan.from_commit, p.head): p for p in missing}.values())
    if not unique:
        return {}
    encoder = Encoder()
    compiled = compile_deltas([DeltaRequest(p.repo.path, p.plan.from_commit, p.head)
                               for p in unique], ctx.runner, part_cache(ctx, cache_limit),
                              ctx.progress, jobs=jobs, ceiling=ceiling, encoder=encoder)
    # The compiler runs in this process: its peak is the process's (Linux: KiB).
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    knobs: dict[str, object] = {"generator": "builder", **encoder.identity(),
                                "own_part_bytes": encoder.own_part_bytes,
                                "part_target_bytes": encoder.part_target_bytes}
    made: dict[tuple[str | None, str], Generated] = {}
    for path, delta in zip(unique, compiled, strict=True):
        pieces = delta.pieces
        how = (f"{pieces.parts} parts: {pieces.cached} from the cache, {pieces.made} made, "
               f"{pieces.shared} shared with other paths ({pieces.made_seconds:.1f}s of "
               f"making), ready after {delta.ready_seconds:.1f}s")
        made[path.plan.from_commit, path.head] = Generated(
            True, delta.ready_seconds, peak, how, knobs,
            {**asdict(pieces), "ready_seconds": delta.ready_seconds})
    return {id(p): made[p.plan.from_commit, p.head] for p in missing}


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


