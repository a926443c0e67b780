"""One architecture against two (issue 13): the whole chain (`build-image`, sample base to
installer ISOs) cold into a fresh directory, then again on that directory (no-op), for the
sample release with `architectures: [x86_64]` and with `[x86_64, aarch64]`.

Rounds alternate the two releases so machine noise hits both alike; medians are reported.
Every round also checks reproducibility: each cold build's commits (per ref) and RPMs
(sha256) must equal the first round's of the same release. Needs root (compose).
"""

from __future__ import annotations

import hashlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
RELEASES = {"x86_64": ["x86_64"], "x86_64+aarch64": ["x86_64", "aarch64"]}


def _timed(*args: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "builder", *args], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def _fingerprint(build: Path) -> dict[str, str]:
    """Each ref's commit and each RPM's sha256: what must not change between cold builds."""
    repo = build / "ostree" / "repo"
    refs = subprocess.run(["ostree", f"--repo={repo}", "refs"], capture_output=True, text=True,
                          check=True).stdout.split()
    prints = {ref: subprocess.run(["ostree", f"--repo={repo}", "rev-parse", ref],
                                  capture_output=True, text=True, check=True).stdout.strip()
              for ref in refs}
    for rpm in sorted((build / "rpms").glob("*.rpm")):
        prints[rpm.name] = hashlib.sha256(rpm.read_bytes()).hexdigest()
    return prints


def _release(work: Path, arches: list[str], release: Path) -> Path:
    data = yaml.safe_load(release.read_text())
    data["architectures"] = arches
    path = work / f"release-{'-'.join(arches)}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def measure(rounds: int, release: Path) -> dict[str, Any]:
    times: dict[str, dict[str, list[float]]] = {
        name: {"cold": [], "noop": []} for name in RELEASES}
    first: dict[str, dict[str, str]] = {}
    reproducible = {name: True for name in RELEASES}
    work = Path(tempfile.mkdtemp(prefix="bench-arches-"))
    try:
        for _ in range(rounds):
            for name, arches in RELEASES.items():
                build = work / "build"
                command = ["--release", str(_release(work, arches, release)), "build-image",
                           "--build-dir", str(build)]
                times[name]["cold"].append(_timed(*command))
                times[name]["noop"].append(_timed(*command))
                prints = _fingerprint(build)
                reproducible[name] &= first.setdefault(name, prints) == prints
                shutil.rmtree(build)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result: dict[str, Any] = {"benchmark": "arches", "rounds": rounds, "releases": {}}
    for name, runs in times.items():
        cold, noop = statistics.median(runs["cold"]), statistics.median(runs["noop"])
        result["releases"][name] = {
            "cold_seconds": runs["cold"], "noop_seconds": runs["noop"],
            "cold_median": round(cold, 2), "noop_median": round(noop, 2),
            "speedup": round(cold / noop, 1), "reproducible": reproducible[name],
            "refs_and_rpms": len(first[name])}
    one, two = (result["releases"][name]["cold_median"] for name in RELEASES)
    result["two_over_one_cold"] = round(two / one, 2)
    return result


def report(result: dict[str, Any]) -> str:
    lines = ["| release | cold (s, median) | no-op (s, median) | no-op speed-up | "
             "cold builds identical |", "|---|---|---|---|---|"]
    for name, row in result["releases"].items():
        lines.append(f"| {name} | {row['cold_median']:.2f} | {row['noop_median']:.2f} | "
                     f"{row['speedup']}x | {'yes' if row['reproducible'] else 'NO'} "
                     f"({row['refs_and_rpms']} refs and RPMs) |")
    lines.append(f"\ntwo architectures take {result['two_over_one_cold']}x the cold time of "
                 f"one ({result['rounds']} rounds)")
    return "\n".join(lines)
