"""How each update path is generated: ostree's knobs from the file sizes and a memory ceiling.

ostree 2022.7's delta compiler (src/libostree/ostree-repo-static-delta-compilation.c):
- A new file is "modified" when the from-commit has a file with the same basename (or, in a
  second pass, the same name before the first '.') whose size is within 30% of it; .xz and
  .bz2 files and empty files never are (ostree-repo-static-delta-compilation-analysis.c).
  `similar_pairs` (builder/delta/pairs.py) mirrors that rule.
- A modified file is first tried with rollsum (used when at least 50% of its rolling-checksum
  chunks match the old file; no knob), else with bsdiff when the two sizes SUMMED are at most
  --max-bsdiff-size (MB of 10^6, default 128: a 96 MB executable and its predecessor, 192 MB,
  are not bsdiffed by default), else it is not a delta at all.
- Every new file that was not rollsummed or bsdiffed and is over --min-fallback-size (default
  4 MB; 0 disables) becomes a fallback object: left out of the parts, fetched whole over HTTP,
  and fatal to `apply-offline`. Everything else goes whole into the parts.
- Parts are cut after --max-chunk-size MB (default 32) of uncompressed payload and each is
  compressed with xz preset 8 (32 MiB dictionary), so larger parts compress no better.

So every path here uses --min-fallback-size=0 (no fallback objects, ever), a
--max-bsdiff-size that covers every modified pair whose bsdiff fits the memory ceiling, and
--max-chunk-size=32. Memory: ostree's bsdiff (qsufsort) keeps two 8-byte suffix arrays of the
old file plus both files: a 96 MB file peaked at 1.62 GB, 17x its size. Pairs over the
ceiling are left to rollsum or sent whole, and the report says so.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

from builder.core.ostree import TreeFile
from builder.delta.pairs import Pair, similar_pairs

MB = 1000 * 1000  # ostree's knobs count megabytes of 10^6 bytes
BSDIFF_BYTES_PER_OLD_BYTE = 17
PROCESS_BASE = 64 * 1024 * 1024
XZ_PRESET_8 = 370 * 1024 * 1024  # liblzma's encoder memory at preset 8
PART_MB = 32
DEFAULT_MAX_BSDIFF_MB = 128
# Relative costs for ordering the paths (seconds per MB, measured here on one core).
BSDIFF_SECONDS_PER_MB = 0.45  # per MB of old + new
XZ_SECONDS_PER_MB = 0.6


@dataclass(frozen=True)
class PathPlan:
    from_commit: str | None
    max_bsdiff_mb: int
    part_mb: int
    pairs: tuple[Pair, ...]            # every modified file ostree will find
    over_ceiling: tuple[Pair, ...]     # modified files whose bsdiff would not fit the ceiling
    new_bytes: int                     # new content not covered by a pair
    largest_new: int
    memory_estimate: int
    cost: float

    def generate_args(self) -> list[str]:
        return ["--min-fallback-size=0", f"--max-bsdiff-size={self.max_bsdiff_mb}",
                f"--max-chunk-size={self.part_mb}"]

    def to_json(self) -> dict[str, object]:
        return {"min_fallback_size_mb": 0, "max_bsdiff_size_mb": self.max_bsdiff_mb,
                "max_chunk_size_mb": self.part_mb,
                "memory_estimate_bytes": self.memory_estimate,
                "bsdiff_over_ceiling": [p.new.path for p in self.over_ceiling]}


def ostree_bsdiff_memory(pair: Pair) -> int:
    """Peak memory of ostree's bsdiff (qsufsort) of one pair."""
    return PROCESS_BASE + BSDIFF_BYTES_PER_OLD_BYTE * pair.old.size + pair.new.size


def plan_path(from_commit: str | None, old_files: Sequence[TreeFile],
              new_files: Sequence[TreeFile], ceiling: int) -> PathPlan:
    """The knobs for one update path (old_files is empty for a delta from scratch)."""
    pairs = similar_pairs(old_files, new_files) if from_commit else []
    fitting: list[Pair] = []
    over: list[Pair] = []
    # One threshold on summed sizes: include pairs in ascending order while they fit.
    for pair in sorted(pairs, key=lambda p: p.summed):
        (fitting if not over and ostree_bsdiff_memory(pair) <= ceiling else over).append(pair)
    max_bsdiff_mb = DEFAULT_MAX_BSDIFF_MB
    if fitting:
        max_bsdiff_mb = math.ceil(max(p.summed for p in fitting) / MB)
    if over:
        max_bsdiff_mb = min(max_bsdiff_mb, (over[0].summed - 1) // MB)
    old_checksums = {f.checksum for f in old_files}
    paired = {p.new.checksum for p in pairs}
    new_objects = {f.checksum: f.size for f in new_files if f.checksum not in old_checksums}
    whole = [size for checksum, size in new_objects.items() if checksum not in paired]
    largest = max(new_objects.values(), default=0)
    xz_memory = PROCESS_BASE + XZ_PRESET_8 + PART_MB * MB + largest
    memory = max([xz_memory, *(ostree_bsdiff_memory(p) for p in fitting)])
    cost = (sum(p.summed for p in fitting) * BSDIFF_SECONDS_PER_MB
            + (sum(whole) + sum(p.new.size for p in over)) * XZ_SECONDS_PER_MB) / MB
    return PathPlan(from_commit, max(max_bsdiff_mb, 1), PART_MB, tuple(pairs), tuple(over),
                    sum(whole), largest, memory, cost)


def machine_memory() -> int:
    """Physical memory in bytes (MemTotal), for the default ceiling."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def default_ceiling() -> int:
    """At most half the machine's memory for all delta generation running at once."""
    return machine_memory() // 2


def machine_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


def parse_size(text: str) -> int:
    """'12G', '800M', '1.5G' or a number of bytes; K/M/G/T are powers of 1024."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = value[-1:] if value[-1:] in units and value[-1:] else ""
    number = value[:-1] if unit else value
    try:
        size = float(number) * units[unit]
    except ValueError:
        raise ValueError(f"{text!r} is not a size (e.g. 8G, 1500M or bytes)") from None
    if size <= 0:
        raise ValueError(f"{text!r} must be more than 0")
    return int(size)


def schedule(plans: Sequence[PathPlan]) -> list[PathPlan]:
    """Longest first: on few cores the from-scratch path (xz of everything) and the
    bsdiff-heavy paths finish together instead of one running alone at the end."""
    return sorted(plans, key=lambda p: p.cost, reverse=True)
