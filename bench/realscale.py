"""Update paths at real size (issue 11): `python -m bench realscale [--series S] [--releases N]`.

Composes the releases of a real-scale series (bench/fixture.py) into one build directory,
then runs the `deltas` stage from scratch (existing deltas removed) and measures, in the
same run, on the last two releases (the adjacent pair):
- the update delta against per-file `xdelta3 -9` of every modified file against its
  predecessor plus `zstd -19` of every new file (the xdelta3 bound), and against `zstd -19`
  of all changed files. A container layer rebuilt at a new digest lands in a new
  overlay/<layer>/diff directory, so a file's predecessor is the file at the same path under
  the old layer's diff directory;
- fallback objects of every path; every offline file applied with `apply-delta` and checked
  with `ostree fsck` on a bare repo holding only its from-commit (from scratch: an empty one);
- the stage's wall time against its slowest path's generation, and each path's peak memory
  against the ceiling;
- the devices' updater (microshift-update, issue 12) on a simulated device holding the
  from-commit: bytes served against the delta file, without and with 5 cuts, beside a plain
  `ostree pull` (bench/ota.py);
- the same update in image mode: the layers of the bootc image a device pulls
  (bench/image_mode.py).
Composes and downloads are cached under OUT/realscale/ and OUT/cache/; deltas and their
parts never are.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import image_mode, image_ota, ota
from bench.fixture import SERIES, Series, image_bytes, payload, release_file
from builder.core.ostree import Repo, TreeFile
from builder.core.runner import Runner
from builder.core.signing import SAMPLE_PUBLIC_KEY
from builder.core.steps import builder_code_digest
from builder.device.commits import UpdatePair

ROOT = Path(__file__).resolve().parent.parent
LAYER_DIR = re.compile(r"/overlay/[0-9a-f]{64}/diff/")
TARGETS = {"delta_vs_xdelta3": 0.7, "delta_vs_zstd19": 0.5, "wall_vs_slowest_path": 1.3}


def builder(*args: str | Path, release: Path | None = None) -> float:
    started = time.perf_counter()
    argv = [sys.executable, "-m", "builder", *(["--release", str(release)] if release else []),
            *map(str, args)]
    proc = subprocess.run(argv, cwd=ROOT, check=False, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"builder {' '.join(map(str, args))} failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - started


def compose_series(series: Series, releases: int, cache: Path, build: Path) -> list[Path]:
    """build-image --until bootc for each release, oldest first (cached steps reused; each
    release's bootc image is planned from the one before, as a release engineer's are).

    Commits composed by another version of the builder are dropped first: composing the
    older releases again onto a ref whose head is the newest would add commits of them on
    top of it (the measured history must be the releases in order)."""
    if _composed_by_another_builder(build):
        print("  the builder changed since these commits were composed: composing afresh",
              flush=True)
        shutil.rmtree(build / "ostree")
    files = []
    for index in range(len(series.payloads) - releases, len(series.payloads)):
        release = release_file(series, index, cache, build.parent / "releases")
        seconds = builder("build-image", "--until", "bootc", "--build-dir", build,
                          release=release)
        print(f"  release {index + 1}: composed in {seconds:.0f}s", flush=True)
        files.append(release)
    return files


def _composed_by_another_builder(build: Path) -> bool:
    records = sorted((build / "ostree" / "compose-inputs").rglob("*.json"))
    if not (build / "ostree").exists():
        return False
    try:
        built_by = {json.loads(r.read_text())["inputs"]["builder"] for r in records}
    except (OSError, ValueError, KeyError, TypeError):
        return True
    return built_by != {builder_code_digest()}


def _normalized(files: list[TreeFile]) -> dict[str, TreeFile]:
    return {LAYER_DIR.sub("/overlay/*/diff/", f.path): f for f in files}


def baselines(repo: Repo, old: str, new: str, scratch: Path) -> dict[str, int]:
    """xdelta3 -9 bound and zstd -19 of the files that changed between two commits."""
    before, after = _normalized(repo.files(old)), _normalized(repo.files(new))
    zstd = xdelta = modified = added = 0
    for key, file in sorted(after.items()):
        previous = before.get(key)
        if previous is not None and previous.checksum == file.checksum:
            continue
        new_file = scratch / "new"
        _cat(repo, new, file.path, new_file)
        zstd += _size(["zstd", "-19", "-q", "-c", str(new_file)])
        if previous is None:
            added += 1
            xdelta += _size(["zstd", "-19", "-q", "-c", str(new_file)])
            continue
        modified += 1
        old_file = scratch / "old"
        _cat(repo, old, previous.path, old_file)
        xdelta += _size(["xdelta3", "-9", "-e", "-c", "-s", str(old_file), str(new_file)])
    return {"modified_files": modified, "new_files": added, "zstd19_bytes": zstd,
            "xdelta3_bound_bytes": xdelta}


def _cat(repo: Repo, commit: str, path: str, dest: Path) -> None:
    with dest.open("wb") as out:
        subprocess.run(["ostree", f"--repo={repo.path}", "cat", commit, path], stdout=out,
                       check=True)


def _size(argv: list[str]) -> int:
    return len(subprocess.run(argv, check=True, capture_output=True).stdout)


def apply_checks(repo: Repo, report: dict[str, Any], files_dir: Path,
                 scratch: Path) -> list[dict[str, Any]]:
    """Each offline file onto a bare repo holding only its from-commit (or an empty one)."""
    runner = Runner()
    base = scratch / "base"
    subprocess.run(["ostree", f"--repo={base}", "init", "--mode=bare"], check=True)
    results = []
    for path in report["paths"]:
        source = path["from_commit"]
        if source:
            subprocess.run(["ostree", f"--repo={base}", "pull-local", str(repo.path), source],
                           check=True, capture_output=True)
        device = scratch / f"device-{(source or 'empty')[:12]}"
        subprocess.run(["ostree", f"--repo={device}", "init", "--mode=bare"], check=True)
        if source:  # hardlinks from the base repo: only the delta's own objects are new
            subprocess.run(["ostree", f"--repo={device}", "pull-local", str(base), source],
                           check=True, capture_output=True)
        applied = runner.measured([sys.executable, "-m", "builder", "apply-delta", "--repo",
                                   str(device), str(files_dir / path["offline_file"])],
                                  check=False)
        fsck = subprocess.run(["ostree", f"--repo={device}", "fsck"], capture_output=True,
                              text=True, check=False)
        results.append({"from_commit": source, "file": path["offline_file"],
                        "bytes": path["offline_bytes"],
                        "applied": applied.proc.returncode == 0,
                        "apply_seconds": round(applied.seconds, 1),
                        "apply_peak_memory_bytes": applied.peak_rss,
                        "fsck_ok": fsck.returncode == 0,
                        "error": applied.proc.stderr.decode(errors="replace")[-500:]
                        if applied.proc.returncode else ""})
        shutil.rmtree(device)
    return results


def measure(series_name: str, releases: int, out: Path) -> dict[str, Any]:
    series = SERIES[series_name]
    cache, build = out / "cache", out / "realscale" / f"{series.name}-{releases}" / "build"
    print(f"realscale {series.name}: composing {releases} releases", flush=True)
    release_files = compose_series(series, releases, cache, build)
    repo = Repo(build / "ostree" / "repo", Runner())
    shutil.rmtree(repo.path / "deltas", ignore_errors=True)  # time a fresh generation:
    shutil.rmtree(build / "deltas", ignore_errors=True)      # no deltas, no cached parts
    shutil.rmtree(build / "cache" / "delta-parts", ignore_errors=True)
    print("  deltas stage ...", flush=True)
    stage = builder("deltas", "--build-dir", build, "--from-count", "3",
                    release=release_files[-1])
    [report_file] = (build / "deltas").rglob("report.json")
    report = json.loads(report_file.read_text())
    update = next(p for p in report["paths"] if p["from_commit"])  # the adjacent pair
    with tempfile.TemporaryDirectory(prefix="realscale-", dir=out) as scratch:
        print("  baselines (xdelta3 -9, zstd -19) ...", flush=True)
        bounds = baselines(repo, update["from_commit"], report["to_commit"], Path(scratch))
        print("  applying every offline file ...", flush=True)
        applied = apply_checks(repo, report, report_file.parent, Path(scratch))
        print("  the devices' updater (microshift-update) over the same update ...", flush=True)
        pair = UpdatePair(repo.path, report["ref"], update["from_commit"], report["to_commit"],
                          "compose", build / "gpg" / SAMPLE_PUBLIC_KEY)
        over_the_air = ota.measure_pair(pair, Path(scratch))
        print("  the same update in image mode ...", flush=True)
        mode = image_mode.measure(build, repo, update["from_commit"], report["to_commit"],
                                  Path(scratch))
        print("  an image-mode device over the same update (3 cuts) ...", flush=True)
        mode["device"] = image_ota.measure(build, release_files[-1], pair, Path(scratch))
    measured = {"stage": stage, "bounds": bounds, "applied": applied, "ota": over_the_air,
                "image_mode": mode}
    return summarize(series, releases, cache, report, measured)


def summarize(series: Series, releases: int, cache: Path, report: dict[str, Any],
              measured: dict[str, Any]) -> dict[str, Any]:
    stage, bounds, applied = measured["stage"], measured["bounds"], measured["applied"]
    update = next(p for p in report["paths"] if p["from_commit"])
    last = len(series.payloads) - 1
    generated = [p["generation_seconds"] for p in report["paths"] if p["generation_seconds"]]
    slowest = max(generated)
    result = {
        "benchmark": "realscale", "series": series.name, "releases": releases,
        "payload": {"wheels": [f"{w.spec} sha256:{w.sha256}" for w in series.payloads],
                    "bytes": payload(series, last, cache).stat().st_size},
        "image_content_bytes": image_bytes(series, last, cache),
        "update": {"from_version": update["from_version"], "to_version": report["to_version"],
                   "delta_bytes": update["delta_bytes"], "parts": update["delta_parts"],
                   "object_pull_bytes": update["object_pull_bytes"],
                   "full_bytes": update["full_bytes"],
                   "large_files": update["large_files"], **bounds},
        "paths": [{k: p[k] for k in ("from_version", "delta_bytes", "delta_parts",
                                     "fallback_objects", "generation_seconds", "path_seconds",
                                     "peak_memory_bytes", "knobs", "pieces", "offline_bytes")}
                  for p in report["paths"]],
        "stage_seconds": round(stage, 1), "stage_wall_seconds": report["wall_seconds"],
        "slowest_path_seconds": slowest, "jobs": report["jobs"],
        "memory_ceiling_bytes": report["memory_ceiling_bytes"], "applied": applied,
        "ota": measured["ota"], "image_mode": measured["image_mode"],
    }
    mode = measured["image_mode"]
    mode["tar_diff_vs_static_delta"] = round(mode["tar_diff_bytes"] / update["delta_bytes"], 3) \
        if mode["tar_diff_bytes"] else None
    result["ratios"] = {
        "delta_vs_xdelta3": round(update["delta_bytes"] / bounds["xdelta3_bound_bytes"], 3),
        "delta_vs_zstd19": round(update["delta_bytes"] / bounds["zstd19_bytes"], 3),
        "wall_vs_slowest_path": round(report["wall_seconds"] / slowest, 3),
    }
    result["checks"] = checks(result, report)
    return result


def checks(result: dict[str, Any], report: dict[str, Any]) -> dict[str, bool]:
    ratios = result["ratios"]
    previous = sum(1 for p in report["paths"] if p["from_commit"])
    found = {name: ratios[name] <= limit for name, limit in TARGETS.items()
             if name != "wall_vs_slowest_path" or previous >= 3}
    found["no_fallback_objects"] = all(p["fallback_objects"] == 0 for p in report["paths"])
    found["every_offline_file_applies"] = all(a["applied"] and a["fsck_ok"]
                                              for a in result["applied"])
    found["peak_memory_within_ceiling"] = all(
        (p["peak_memory_bytes"] or 0) <= report["memory_ceiling_bytes"] for p in report["paths"])
    updates = result["ota"]
    found["ota_wire_within_1.02x_delta"] = updates["no cuts"]["ratio"] <= 1.02
    found["ota_5_cuts_within_1.05x_delta"] = updates["5 cuts"]["ratio"] <= 1.05 and \
        updates["5 cuts"]["cuts"] == 5 and updates["5 cuts"]["duplicate_bytes"] == 0
    for label in ("5 Mbit/s, 5 cuts", "1 Mbit/s"):
        if label in updates:  # throttled rows need network namespaces
            found[f"ota_{label}_within_1.1x_bytes_over_rate"] = \
                updates[label]["time_ratio"] is not None and updates[label]["time_ratio"] <= 1.1
    ratio = result["image_mode"]["os_pull_vs_changed_gzip"]
    found["image_mode_os_layers_within_1.3x_changed_gzip"] = \
        ratio is not None and ratio <= image_mode.TARGET
    delta_ratio = result["image_mode"]["tar_diff_vs_static_delta"]
    found["image_mode_tar_diff_within_1.2x_static_delta"] = \
        delta_ratio is not None and delta_ratio <= image_mode.DELTA_TARGET
    device = result["image_mode"]["device"]
    found["image_device_wire_within_1.2x_static_delta_3_cuts"] = \
        device["bytes_on_wire"] <= image_mode.DELTA_TARGET * result["update"]["delta_bytes"] \
        and device["cuts"] == 3 and device["duplicate_bytes"] == 0 and device["staged"]
    found["payload_at_least_90MB"] = result["payload"]["bytes"] >= 90_000_000
    found["images_at_least_300MB"] = result["image_content_bytes"] >= 300_000_000
    return found


def _how(path: dict[str, Any]) -> str:
    """ostree's generator: its --max-bsdiff-size; the builder's: where the parts came from."""
    if path.get("pieces"):
        pieces = path["pieces"]
        return (f"builder: {pieces['parts']} parts, {pieces['cached']} cached, "
                f"{pieces['made']} made, {pieces['shared']} shared")
    knobs = path["knobs"]
    return (f"ostree: max-bsdiff-size {knobs['max_bsdiff_size_mb']}"
            if "max_bsdiff_size_mb" in knobs else "kept")


def report(r: dict[str, Any]) -> str:
    mib = 1024 * 1024
    u = r["update"]

    def row(label: str, size: int) -> str:
        return f"| {label} | {size / mib:.2f} | {size / u['delta_bytes']:.2f} |"

    lines = [f"series {r['series']}, {r['releases']} releases; payload "
             f"{r['payload']['bytes'] / 1e6:.1f} MB, image content "
             f"{r['image_content_bytes'] / 1e6:.0f} MB",
             "", f"update {u['from_version']} -> {u['to_version']} "
             f"({u['modified_files']} modified, {u['new_files']} new files):", "",
             "| what crosses the link | MiB | x delta |", "|---|---|---|",
             row(f"ostree static delta ({u['parts']} parts)", u["delta_bytes"]),
             row("xdelta3 -9 bound (modified: xdelta3 vs predecessor; new: zstd -19)",
                 u["xdelta3_bound_bytes"]),
             row("zstd -19 of the changed files", u["zstd19_bytes"]),
             row("plain pull of the changed objects", u["object_pull_bytes"]),
             row("full commit", u["full_bytes"]), "",
             "| path from | delta MiB | parts | fallback | generation s | peak memory GiB | "
             "how |", "|---|---|---|---|---|---|---|"]
    for p in r["paths"]:
        peak = (p["peak_memory_bytes"] or 0) / 2**30
        lines.append(f"| {p['from_version'] or 'scratch'} | {p['delta_bytes'] / mib:.2f} | "
                     f"{p['delta_parts']} | {p['fallback_objects']} | "
                     f"{p['generation_seconds'] or 0:.0f} | {peak:.2f} | "
                     f"{_how(p)} |")
    lines += ["", "| offline file from | MiB | applied + fsck | apply s | apply peak GiB |",
              "|---|---|---|---|---|"]
    for a in r["applied"]:
        lines.append(f"| {(a['from_commit'] or 'empty')[:12]} | {a['bytes'] / mib:.2f} | "
                     f"{'yes' if a['applied'] and a['fsck_ok'] else 'NO'} | "
                     f"{a['apply_seconds']} | {a['apply_peak_memory_bytes'] / 2**30:.2f} |")
    lines += ["", "| microshift-update | delta MiB | served / delta | cuts | bytes twice | "
                  "download / (bytes / rate) | ostree pull / delta |",
              "|---|---|---|---|---|---|---|"]
    lines += [ota.ota_row(label, row) for label, row in r["ota"].items()]
    lines += ["", *image_mode.row(r["image_mode"])]
    ratios = r["ratios"]
    lines += ["", f"delta / xdelta3 bound = {ratios['delta_vs_xdelta3']} (target <= 0.7); "
                  f"delta / zstd -19 = {ratios['delta_vs_zstd19']} (target <= 0.5)",
              f"deltas stage wall {r['stage_wall_seconds']:.0f}s with {r['jobs']} jobs / "
              f"slowest path {r['slowest_path_seconds']:.0f}s = "
              f"{ratios['wall_vs_slowest_path']} (target <= 1.3 for 3 previous commits); "
              f"memory ceiling {r['memory_ceiling_bytes'] / 2**30:.1f} GiB",
              "checks: " + ", ".join(f"{k} {'ok' if v else 'FAILED'}"
                                     for k, v in r["checks"].items())]
    return "\n".join(lines)
