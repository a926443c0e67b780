"""What each update path costs a device, and how its delta was made (report.json, report.txt).

Per update path, what a device downloads:
  delta        superblock + parts (+ fallback objects, which `deltas` never makes);
  object pull  the archive objects new in H and not in P (what a pull without deltas
               fetches, one HTTP request each) plus the commit object and its signature;
  full commit  every object of H (a fresh pull);
the time each takes at 5 and 10 Mbit/s (payload only: no TLS or HTTP overhead); and how the
delta was made: ostree's knobs, generation time and peak memory, and how each large new
file travels (bsdiff or rollsum against its predecessor, or whole).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from builder.core.build_layout import Layout
from builder.core.errors import BuildError
from builder.core.ostree import Repo, TreeObjects, delta_dir, object_path
from builder.core.progress import human_bytes
from builder.publish.changes import CommitChanges
from builder.publish.offline import Superblock, parse_superblock

LINK_SPEEDS_MBIT = (5, 10)


@dataclass(frozen=True)
class LargeFile:
    """A new file of at least LARGE_FILE bytes in an update path, and how it travels."""

    path: str
    bytes: int
    from_path: str | None  # the predecessor ostree deltas it against, if any
    from_bytes: int | None
    encoding: str          # bsdiff | rollsum | whole


@dataclass(frozen=True)
class UpdatePath:
    from_commit: str | None  # None: from scratch
    from_version: str | None
    delta_bytes: int
    delta_parts: int
    fallback_objects: int
    object_pull_bytes: int
    object_pull_count: int
    full_bytes: int
    offline_file: str | None
    seconds: dict[str, dict[str, float]] = field(default_factory=dict)
    offline_bytes: int | None = None
    offline_sha256: str | None = None
    generated: bool = True              # False: an existing delta was kept
    generation_seconds: float | None = None  # ostree: its run; builder: until written
    path_seconds: float | None = None   # generation + offline file + checks + measuring
    peak_memory_bytes: int | None = None
    knobs: dict[str, object] = field(default_factory=dict)
    large_files: tuple[LargeFile, ...] = ()
    # The builder's generator: parts taken from the cache, made, shared with other paths.
    pieces: dict[str, Any] | None = None


@dataclass(frozen=True)
class DeltaReport:
    ref: str
    to_commit: str
    to_version: str | None
    repo: str
    paths: tuple[UpdatePath, ...]
    wall_seconds: float | None = None
    jobs: int | None = None
    memory_ceiling_bytes: int | None = None
    # What each update path from a previous commit changes (packages, images).
    changes: tuple[CommitChanges, ...] = ()
    # The same update in image mode (the bootc stage's record of this head), when it has one.
    image_mode: dict[str, Any] | None = None

    def to_json(self) -> str:
        data = asdict(self)
        data["changes"] = [change.to_dict() for change in self.changes]
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    def text(self) -> str:
        lines = [f"Update paths to {self.ref} = {self.to_commit[:12]} "
                 f"(version {self.to_version or '?'}) in {self.repo}",
                 f"{'from':<28}{'delta':>12}{'object pull':>14}{'full commit':>14}"
                 + "".join(f"{f'delta@{s}Mbit':>14}{f'pull@{s}Mbit':>13}"
                           for s in LINK_SPEEDS_MBIT)]
        for path in self.paths:
            row = (f"{_origin(path):<28}{human_bytes(path.delta_bytes):>12}"
                   f"{human_bytes(path.object_pull_bytes):>14}{human_bytes(path.full_bytes):>14}")
            for speed in LINK_SPEEDS_MBIT:
                times = path.seconds[f"{speed}mbit"]
                row += f"{_secs(times['delta']):>14}{_secs(times['object_pull']):>13}"
            lines.append(row)
        lines += ["", f"{'from':<28}{'parts':>6}{'fallback':>10}{'generated':>11}"
                      f"{'peak memory':>13}  how"]
        for path in self.paths:
            made = (f"{path.generation_seconds:.1f}s" if path.generated
                    and path.generation_seconds is not None else "kept")
            peak = human_bytes(path.peak_memory_bytes) if path.peak_memory_bytes else "-"
            lines.append(f"{_origin(path):<28}{path.delta_parts:>6}{path.fallback_objects:>10}"
                         f"{made:>11}{peak:>13}  {_how(path)}")
        lines += _large_file_lines(self.paths)
        lines += _image_mode_lines(self.image_mode, self.paths)
        if self.wall_seconds is not None:
            lines.append(f"\nall paths in {self.wall_seconds:.1f}s with up to {self.jobs} at "
                         f"once, memory ceiling {human_bytes(self.memory_ceiling_bytes or 0)}")
        lines += [change.text() for change in self.changes]
        return "\n".join(lines)


def _how(path: UpdatePath) -> str:
    """The generator's knobs (ostree), or where the parts came from (builder)."""
    if path.pieces:
        pieces = path.pieces
        return (f"builder: {pieces['cached']} parts from the cache, {pieces['made']} made, "
                f"{pieces['shared']} shared with other paths")
    return " ".join(f"{k}={v}" for k, v in sorted(path.knobs.items()) if k.endswith("_mb"))


def _large_file_lines(paths: tuple[UpdatePath, ...]) -> list[str]:
    lines: list[str] = []
    for path in paths:
        if not path.large_files:
            continue
        lines += ["", f"large new files from {_origin(path)}:"]
        for large in path.large_files:
            source = (f"against {large.from_path} ({human_bytes(large.from_bytes or 0)})"
                      if large.from_path else "no predecessor")
            lines.append(f"  {large.encoding:<8}{human_bytes(large.bytes):>11}  {large.path}  "
                         f"{source}")
    return lines


def image_mode_cost(layout: Layout, ref: str, head: str) -> dict[str, Any] | None:
    """What a device on the previous bootc image of `ref` pulls to get the image of `head`
    (DIR/bootc/NAME.ARCH.json, written by the bootc stage), when that image was built."""
    reports = layout.bootc_report("*", "*")
    for path in sorted(reports.parent.glob(reports.name)) if reports.parent.is_dir() else []:
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(found, dict) or not isinstance(found.get("update"), dict):
            continue
        update = found["update"]
        if found.get("ref") == ref and found.get("commit") == head:
            return {"report": str(path), "manifest": found.get("manifest"),
                    "layers": len(found.get("layers", [])), **update}
    return None


def _image_mode_lines(mode: dict[str, Any] | None, paths: tuple[UpdatePath, ...]) -> list[str]:
    if mode is None or mode.get("pull_bytes") is None:
        return []
    path = next((p for p in paths if p.from_commit == mode["from_commit"]), None)
    delta = f", ostree static delta {human_bytes(path.delta_bytes)}" if path else ""
    image_delta = mode.get("delta")
    as_delta = f"; as a tar-diff delta {human_bytes(image_delta['bytes'])}" \
        if isinstance(image_delta, dict) and isinstance(image_delta.get("bytes"), int) else ""
    return ["", f"image mode (bootc) from {str(mode['from_commit'])[:12]}: "
                f"{mode['changed_layers']} of {mode['layers']} layers, "
                f"{human_bytes(mode['pull_bytes'])}{as_delta}; single-layer image "
                f"{human_bytes(mode['single_layer_bytes'])}{delta}"]


def _origin(path: UpdatePath) -> str:
    return (f"{path.from_version or '?'} ({path.from_commit[:12]})" if path.from_commit
            else "scratch (--empty)")


def _secs(seconds: float) -> str:
    return f"{seconds:.2f}s" if seconds < 10 else f"{seconds:.0f}s"


def transfer_seconds(size: int, mbit: int) -> float:
    return size * 8 / (mbit * 1_000_000)


def read_superblock(repo: Repo, source: str | None, head: str) -> Superblock:
    path = delta_dir(repo.path, source, head) / "superblock"
    if not path.is_file():
        raise BuildError(f"delta {source or 'empty'} -> {head} is not in {repo.path}")
    return parse_superblock(memoryview(path.read_bytes()), str(path))


def delta_sizes(repo: Repo, source: str | None, head: str) -> tuple[int, int, int]:
    """(bytes on the wire, number of parts, number of fallback objects) of a repo delta."""
    superblock = read_superblock(repo, source, head)
    directory = delta_dir(repo.path, source, head)
    files = sum(p.stat().st_size for p in directory.iterdir() if p.is_file())
    fallback_bytes = sum(superblock.fallbacks)
    return files + fallback_bytes, len(superblock.parts), len(superblock.fallbacks)


def commit_bytes(repo: Repo, commit: str) -> int:
    """The commit object and its detached metadata (signatures), as fetched by a pull."""
    return sum(path.stat().st_size for kind in ("commit", "commitmeta")
               if (path := object_path(repo.path, commit, kind)).is_file())


def objects_bytes(repo: Repo, objects: TreeObjects) -> tuple[int, int]:
    sizes = [path.stat().st_size for path in objects.paths(repo.path) if path.is_file()]
    return sum(sizes), len(sizes)


def measure_update(repo: Repo, source: str | None, head: str,
                   offline_file: str | None = None) -> UpdatePath:
    """Sizes of one update path; usable on any archive repo (benchmarks call this)."""
    delta, parts, fallback = delta_sizes(repo, source, head)
    new_objects = repo.tree_objects(head)
    full, full_count = objects_bytes(repo, new_objects)
    full += commit_bytes(repo, head)
    if source is None:
        pull, pull_count = full, full_count + 1
    else:
        pull, pull_count = objects_bytes(repo, new_objects - repo.tree_objects(source))
        pull += commit_bytes(repo, head)
        pull_count += 1
    seconds = {f"{s}mbit": {"delta": round(transfer_seconds(delta, s), 3),
                            "object_pull": round(transfer_seconds(pull, s), 3),
                            "full": round(transfer_seconds(full, s), 3)}
               for s in LINK_SPEEDS_MBIT}
    return UpdatePath(source, repo.metadata(source, "version") if source else None, delta,
                      parts, fallback, pull, pull_count, full, offline_file, seconds)


def report_dir(build_dir: Path, ref: str) -> Path:
    """DIR/deltas/REF/: one ref's report and offline files, apart from other images' refs.

    ostree ref components start with a letter, digit or '_', so a ref is a safe sub-path."""
    return Layout(build_dir).ref_deltas(ref)
