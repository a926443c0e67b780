"""Publishing a release at real size: what `publish` uploads, and what `sbom` and `diff` cost.

The two releases of bench/update_size.py (a ~24 MB native executable as the microshift
payload) are composed into one build directory, each followed by `deltas`, `sbom` and
`publish` to a local directory (rsync, as to a server). Measured in the same run:
  - bytes written to the target by the first publish (the whole repository) and by the
    second (what is new: the new commit's objects and deltas), against the repository size
    and the update's plain object pull;
  - files rewritten by a publish of an unchanged repository (objects are never re-sent);
  - the time of `sbom` and of `diff` between the two commits, at this size.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.update_size import WHEELS, builder, fetch_executable, release_file


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """path -> (size, mtime_ns) of every file under root."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()}


def written(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> tuple[int,
                                                                                            int]:
    """(bytes, files) created or rewritten between two snapshots."""
    changed = [path for path, stat in after.items() if before.get(path) != stat]
    return sum(after[p][0] for p in changed), len(changed)


def one_round(work: Path, binaries: tuple[Path, Path]) -> dict[str, Any]:
    rel1 = release_file(work, "release-1", binaries[0], 1)
    rel2 = release_file(work, "release-2", binaries[1], 2)
    build, target = work / "build", work / "target"
    steps: dict[str, Any] = {}
    for name, release in (("release1", rel1), ("release2", rel2)):
        builder("build-image", "--until", "compose", "--build-dir", build, release=release)
        builder("deltas", "--build-dir", build, "--no-offline", release=release)
        sbom_seconds = builder("sbom", "--build-dir", build, release=release)
        before = snapshot(target) if target.exists() else {}
        publish_seconds = builder("publish", "--build-dir", build, "--to", target,
                                release=release)
        size, files = written(before, snapshot(target))
        steps[name] = {"sbom_seconds": sbom_seconds, "publish_seconds": publish_seconds,
                       "written_bytes": size, "written_files": files}
    before = snapshot(target)
    noop_seconds = builder("publish", "--build-dir", build, "--to", target, release=rel2)
    size, files = written(before, snapshot(target))
    ref = next(p for p in (target / "repo" / "refs" / "heads").rglob("*") if p.is_file())
    ref_name = str(ref.relative_to(target / "repo" / "refs" / "heads"))
    diff_seconds = builder("diff", "--build-dir", build, f"{ref_name}^", ref_name, release=rel2)
    repo_bytes = sum(s for s, _ in snapshot(build / "ostree" / "repo").values())
    report = next((target / "updates").rglob("report.json")).read_text()
    path = next(p for p in json.loads(report)["paths"] if p["from_commit"])
    return {**steps, "noop": {"publish_seconds": noop_seconds, "written_bytes": size,
                              "written_files": files},
            "diff_seconds": diff_seconds, "repo_bytes": repo_bytes,
            "object_pull_bytes": path["object_pull_bytes"], "delta_bytes": path["delta_bytes"]}


def measure(rounds: int, cache: Path) -> dict[str, Any]:
    cache.mkdir(parents=True, exist_ok=True)
    binaries = tuple(fetch_executable(v, cache) for v in sorted(WHEELS))
    runs = []
    for _ in range(rounds):
        work = Path(tempfile.mkdtemp(prefix="bench-publish-"))
        try:
            runs.append(one_round(work, (binaries[0], binaries[1])))
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def median(*keys: str) -> float:
        values = []
        for run in runs:
            value: Any = run
            for key in keys:
                value = value[key]
            values.append(value)
        return round(statistics.median(values), 2)

    first = runs[0]
    return {"benchmark": "publish", "rounds": rounds, "runs": runs,
            "first_publish_bytes": first["release1"]["written_bytes"],
            "second_publish_bytes": first["release2"]["written_bytes"],
            "noop_publish_files": first["noop"]["written_files"],
            "repo_bytes": first["repo_bytes"], "object_pull_bytes": first["object_pull_bytes"],
            "delta_bytes": first["delta_bytes"],
            "publish_seconds_median": median("release2", "publish_seconds"),
            "noop_publish_seconds_median": median("noop", "publish_seconds"),
            "sbom_seconds_median": median("release2", "sbom_seconds"),
            "diff_seconds_median": median("diff_seconds")}


def report(r: dict[str, Any]) -> str:
    mib = 1024 * 1024
    second = r["second_publish_bytes"]
    return "\n".join([
        "| publish to a local directory (rsync) | MiB written | files |",
        "|---|---|---|",
        f"| release 1 (empty target) | {r['first_publish_bytes'] / mib:.2f} | "
        f"{r['runs'][0]['release1']['written_files']} |",
        f"| release 2 (the update) | {second / mib:.2f} | "
        f"{r['runs'][0]['release2']['written_files']} |",
        f"| again, nothing changed | {r['runs'][0]['noop']['written_bytes'] / mib:.2f} | "
        f"{r['noop_publish_files']} |",
        "",
        f"release 2 wrote {second / r['repo_bytes']:.3f} of the repository "
        f"({r['repo_bytes'] / mib:.2f} MiB); the update's object pull is "
        f"{r['object_pull_bytes'] / mib:.2f} MiB and its delta {r['delta_bytes'] / mib:.2f} MiB "
        "(the publish carries both: objects for pulls, the delta for delta-capable clients)",
        "",
        "| step at this size | median (s) |",
        "|---|---|",
        f"| publish (release 2) | {r['publish_seconds_median']:.2f} |",
        f"| publish, nothing changed | {r['noop_publish_seconds_median']:.2f} |",
        f"| sbom | {r['sbom_seconds_median']:.2f} |",
        f"| diff (release 1 -> 2) | {r['diff_seconds_median']:.2f} |",
    ])
