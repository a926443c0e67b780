"""One large object's delta (issue 34): the builder's generator against ostree's own bsdiff
and `xdelta3 -9`, side by side on the same pair: `python -m bench large-object [--rounds N]`.

The pairs are the real-scale series' executable (bench/fixture.py: Hugo extended, 95.8 MB),
the adjacent releases 0.163.2 -> 0.163.3 and the farthest 0.163.0 -> 0.163.3, each committed
alone as /usr/bin/microshift into an archive repository (one commit per release). Per
round and pair, in an order that rotates:
- xdelta3: `xdelta3 -9 -e -s OLD NEW` of the two files;
- builder: the delta OLD -> NEW from builder/delta (a cold part cache), in a process of its
  own (bench/compile_path.py);
- ostree: `ostree static-delta generate --min-fallback-size=0 --max-bsdiff-size=300` (its
  serial bsdiff of the pair; checked to be a bsdiff, not a rollsum).
Each records wall time, peak memory and bytes (a delta: superblock and parts). Both
deltas of each pair are then applied with `ostree static-delta apply-offline` to a bare
repository holding the old commit, and `ostree fsck` must pass.
Targets: builder time <= 3x xdelta3's; builder bytes <= 1.05x ostree's.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.fixture import SERIES, payload
from builder.core.ostree import Repo, delta_dir
from builder.core.runner import Runner
from builder.publish.encodings import delta_encodings
from builder.publish.offline import write_offline_file
from builder.publish.report import read_superblock

ROOT = Path(__file__).resolve().parent.parent
SERIES_NAME = "hugo-0.163"
PAIRS = (("0.163.2", "0.163.3"), ("0.163.0", "0.163.3"))
SIDES = ("xdelta3", "builder", "ostree")
TARGETS = {"builder_vs_xdelta3_seconds": 3.0, "builder_vs_ostree_bytes": 1.05}
EXECUTABLE = "/usr/bin/microshift"


def _commit(repo: Repo, binary: Path, work: Path, day: int) -> str:
    tree = work / "tree"
    shutil.rmtree(tree, ignore_errors=True)
    (tree / "usr" / "bin").mkdir(parents=True)
    shutil.copy2(binary, tree / "usr" / "bin" / "microshift")
    return repo.runner.output(["ostree", f"--repo={repo.path}", "commit", "--orphan",
                               f"--tree=dir={tree}", f"--timestamp=2026-01-{day:02d}T00:00:00Z",
                               f"--subject=hugo {binary.name}"]).strip()


def _size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file())


def _run_side(side: str, repo: Repo, old: tuple[Path, str], new: tuple[Path, str],
              scratch: Path) -> dict[str, Any]:
    runner = repo.runner
    if side == "xdelta3":
        out = scratch / "xdelta3.out"
        measured = runner.measured(["xdelta3", "-9", "-e", "-f", "-s", old[0], new[0], out])
        return {"seconds": measured.seconds, "peak": measured.peak_rss,
                "bytes": out.stat().st_size}
    directory = delta_dir(repo.path, old[1], new[1])
    shutil.rmtree(directory, ignore_errors=True)
    if side == "builder":
        cache = scratch / "cache"
        shutil.rmtree(cache, ignore_errors=True)
        measured = runner.measured([sys.executable, "-m", "bench.compile_path", repo.path,
                                    old[1], new[1], cache])
    else:
        measured = runner.measured(repo.delta_generate_argv(
            new[1], old[1], ["--min-fallback-size=0", "--max-bsdiff-size=300"]))
    kinds = {e.kind for e in delta_encodings(
        directory, read_superblock(repo, old[1], new[1])).values()}
    keep = scratch / side
    shutil.rmtree(keep, ignore_errors=True)
    shutil.copytree(directory, keep)
    return {"seconds": measured.seconds, "peak": measured.peak_rss, "bytes": _size(directory),
            "encodings": sorted(kinds)}


def _applies(repo: Repo, delta: Path, old: str, new: str, scratch: Path) -> bool:
    """The kept delta, as an offline file, onto a bare repo holding only `old`."""
    runner = repo.runner
    device = scratch / "device"
    shutil.rmtree(device, ignore_errors=True)
    runner.output(["ostree", f"--repo={device}", "init", "--mode=bare"])
    runner.output(["ostree", f"--repo={device}", "pull-local", repo.path, old])
    offline = write_offline_file(delta, scratch / "offline.delta", None)
    applied = runner.run(["ostree", f"--repo={device}", "static-delta", "apply-offline",
                          scratch / offline.file], check=False)
    fsck = runner.run(["ostree", f"--repo={device}", "fsck"], check=False)
    return (applied.returncode == 0 and fsck.returncode == 0
            and Repo(device, runner).has_commit(new))


def measure(rounds: int, out: Path) -> dict[str, Any]:
    series = SERIES[SERIES_NAME]
    cache = out / "cache"
    versions = {w.version: payload(series, i, cache) for i, w in enumerate(series.payloads)}
    with tempfile.TemporaryDirectory(prefix="large-object-", dir=out) as tmp:
        work = Path(tmp)
        repo = Repo(work / "repo", Runner())
        repo.init("archive")
        commits = {v: _commit(repo, path, work, day) for day, (v, path)
                   in enumerate(sorted(versions.items()), start=1)}
        results = []
        for old_v, new_v in PAIRS:
            old, new = (versions[old_v], commits[old_v]), (versions[new_v], commits[new_v])
            runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
            for index in range(rounds):
                order = SIDES[index % 3:] + SIDES[:index % 3]
                for side in order:
                    runs[side].append(_run_side(side, repo, old, new, work))
                    print(f"  {old_v} -> {new_v} round {index + 1} {side}: "
                          f"{runs[side][-1]['seconds']:.1f}s, {runs[side][-1]['bytes']} bytes",
                          flush=True)
            applied = {side: _applies(repo, work / side, old[1], new[1], work)
                       for side in ("builder", "ostree")}
            results.append(_summary(old_v, new_v, versions, runs, applied))
    return {"benchmark": "large-object", "rounds": rounds, "pairs": results,
            "checks": _checks(results)}


def _summary(old_v: str, new_v: str, versions: dict[str, Path],
             runs: dict[str, list[dict[str, Any]]], applied: dict[str, bool]) -> dict[str, Any]:
    median = {side: {k: statistics.median(r[k] for r in runs[side])
                     for k in ("seconds", "peak", "bytes")} for side in SIDES}
    ratio_time = statistics.median(b["seconds"] / x["seconds"] for b, x
                                   in zip(runs["builder"], runs["xdelta3"], strict=True))
    return {"from": old_v, "to": new_v, "old_bytes": versions[old_v].stat().st_size,
            "new_bytes": versions[new_v].stat().st_size, "runs": runs, "median": median,
            "encodings": {s: runs[s][0]["encodings"] for s in ("builder", "ostree")},
            "applied": applied,
            "ratios": {"builder_vs_xdelta3_seconds": round(ratio_time, 3),
                       "builder_vs_ostree_bytes": round(
                           median["builder"]["bytes"] / median["ostree"]["bytes"], 4),
                       "ostree_vs_builder_seconds": round(
                           median["ostree"]["seconds"] / median["builder"]["seconds"], 2)}}


def _checks(results: list[dict[str, Any]]) -> dict[str, bool]:
    found: dict[str, bool] = {}
    for r in results:
        label = f"{r['from']}->{r['to']}"
        for name, limit in TARGETS.items():
            found[f"{label} {name} <= {limit}"] = r["ratios"][name] <= limit
        found[f"{label} ostree used bsdiff"] = r["encodings"]["ostree"] == ["bsdiff"]
        found[f"{label} both apply and fsck"] = all(r["applied"].values())
    return found


def report(result: dict[str, Any]) -> str:
    mib = 1024 * 1024
    lines = ["| pair | side | median s | median bytes (MiB) | peak GiB |", "|---|---|---|---|---|"]
    for r in result["pairs"]:
        for side in SIDES:
            m = r["median"][side]
            lines.append(f"| {r['from']} -> {r['to']} | {side} | {m['seconds']:.1f} | "
                         f"{m['bytes'] / mib:.2f} | {m['peak'] / 2**30:.2f} |")
    lines.append("")
    for r in result["pairs"]:
        ratios = r["ratios"]
        lines.append(f"{r['from']} -> {r['to']}: builder / xdelta3 time "
                     f"{ratios['builder_vs_xdelta3_seconds']} (median of per-round ratios, "
                     f"target <= 3); builder / ostree bytes {ratios['builder_vs_ostree_bytes']} "
                     f"(target <= 1.05); ostree / builder time "
                     f"{ratios['ostree_vs_builder_seconds']}x")
    lines.append("checks: " + ", ".join(f"{k} {'ok' if v else 'FAILED'}"
                                        for k, v in result["checks"].items()))
    return "\n".join(lines)
