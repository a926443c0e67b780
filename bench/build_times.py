"""Cold build vs no-op rebuild of the sample release's RPMs, side by side in one run.

Each round runs `build-image --until rpms` into a fresh directory (cold: sample base + RPMs
+ repo + rpmlint), then the same command again on that directory (no-op: every step is
unchanged).
Rounds alternate cold and no-op so machine noise hits both alike; medians are reported.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _timed(*args: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "builder", *args], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def measure(rounds: int, release: Path) -> dict[str, Any]:
    cold: list[float] = []
    noop: list[float] = []
    for _ in range(rounds):
        work = Path(tempfile.mkdtemp(prefix="bench-build-"))
        try:
            command = ["--release", str(release), "build-image", "--until", "rpms",
                       "--build-dir", str(work)]
            cold.append(_timed(*command))
            noop.append(_timed(*command))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    cold_median, noop_median = statistics.median(cold), statistics.median(noop)
    return {
        "benchmark": "build-times",
        "rounds": rounds,
        "cold_seconds": cold,
        "noop_seconds": noop,
        "cold_median": round(cold_median, 3),
        "noop_median": round(noop_median, 3),
        "speedup": round(cold_median / noop_median, 1),
    }


def report(result: dict[str, Any]) -> str:
    return "\n".join([
        "| build | median (s) | runs (s) |",
        "|---|---|---|",
        f"| cold (sample base + RPMs + repo + rpmlint) | {result['cold_median']:.2f} | "
        + ", ".join(f"{t:.2f}" for t in result["cold_seconds"]) + " |",
        f"| no-op (same inputs again) | {result['noop_median']:.2f} | "
        + ", ".join(f"{t:.2f}" for t in result["noop_seconds"]) + " |",
        f"\nno-op is {result['speedup']}x faster than cold (median ratio, {result['rounds']} "
        "rounds)",
    ])
