"""A whole release matrix at real size (issue 34): `python -m bench matrix`.

1. Compose every release of the hugo-0.163 series (4) for every image profile (4) and both
   architectures (bench/matrix_fixture.py) into one build directory, cached under
   OUT/matrix/ (`build-image --until compose --all-images`, per release).
2. Cold: with no delta and no cached part, `deltas --all-images --from-count 3`: 4 profiles
   x 2 architectures x 3 previous releases = 24 update paths and 8 from scratch, one job.
   Its wall time, and per path the bytes, the parts made, shared or cached
   (DIR/deltas/matrix.json).
3. Every delta applies with stock ostree on a bare repository holding only its from-commit
   (an empty one from scratch): pulled over HTTP with --require-static-deltas, and its
   offline file with `static-delta apply-offline`; `ostree fsck` after each. The adjacent
   update of microshift-full on each architecture against the xdelta3 -9 bound and
   zstd -19 of its changed files (the real-scale tier's size targets).
4. One image changed: in a hard-linked copy of the build directory (the cold one stays at
   release 4 for the next run), microshift-storage is composed again on both architectures
   with a new top layer in its topolvm image; `deltas --all-images` again, with the parts
   the cold run left in the cache: which deltas are kept, which parts are made.
Each deltas run records its wall time, the CPU seconds it used (user + system) and the load
average around it: the machine is shared, and CPU seconds / (wall x cores) says how much of
it the run had.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import Any

from bench.fixture import SERIES
from bench.matrix_fixture import ARCHES, matrix_release_file
from bench.realscale import baselines, builder
from builder.core.ostree import Repo
from builder.core.runner import Runner

SERIES_NAME = "hugo-0.163"
CHANGED_IMAGE = "microshift-storage"
TARGETS = {"cold_wall_seconds": 900.0, "delta_vs_xdelta3": 0.7, "delta_vs_zstd19": 0.5}


def compose(out: Path) -> tuple[Path, list[Path]]:
    series = SERIES[SERIES_NAME]
    cache, work = out / "cache", out / "matrix"
    build = work / "build"
    releases = []
    for index in range(len(series.payloads)):
        release = matrix_release_file(series, index, cache, work / "releases")
        seconds = builder("build-image", "--until", "compose", "--all-images", "--build-dir",
                          build, release=release)
        print(f"  release {index + 1}: every image of both architectures composed in "
              f"{seconds:.0f}s", flush=True)
        releases.append(release)
    return build, releases


def _fresh(build: Path) -> None:
    """No delta in the repository, no offline file, no cached part: a cold start."""
    for path in (build / "ostree" / "repo" / "deltas", build / "deltas",
                 build / "cache" / "delta-parts"):
        shutil.rmtree(path, ignore_errors=True)


def _deltas(build: Path, release: Path) -> dict[str, Any]:
    """One `deltas --all-images` run: its matrix, wall and CPU seconds, load around it."""
    before, load = resource.getrusage(resource.RUSAGE_CHILDREN), os.getloadavg()[0]
    seconds = builder("deltas", "--all-images", "--from-count", "3", "--build-dir", build,
                      release=release)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"stage_seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1),
            "cores": os.cpu_count(), "load_before": load, "load_after": os.getloadavg()[0],
            "matrix": json.loads((build / "deltas" / "matrix.json").read_text())}


def distinct_parts(build: Path) -> int:
    """How many different part files the repository's deltas hold: with nothing cached,
    each was made once if this equals the parts the run made."""
    from builder.publish.report import read_superblock

    repo = Repo(build / "ostree" / "repo", Runner())
    found = set()
    for report in _reports(build):
        for path in report["paths"]:
            superblock = read_superblock(repo, path["from_commit"], report["to_commit"])
            found |= {header.checksum for header in superblock.parts}
    return len(found)


def _reports(build: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((build / "deltas").rglob("report.json"))]


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _device(runner: Runner, path: Path, source_repo: Path, commit: str | None) -> Path:
    runner.output(["ostree", f"--repo={path}", "init", "--mode=bare"])
    if commit:
        runner.output(["ostree", f"--repo={path}", "pull-local", source_repo, commit])
    return path


def _check_path(repo: Path, url: str, report: dict[str, Any], path: dict[str, Any],
                scratch: Path) -> dict[str, Any]:
    """One path: pulled over HTTP, and applied from its offline file; fsck after each."""
    runner = Runner()
    source, head, ref = path["from_commit"], report["to_commit"], report["ref"]
    name = f"{ref.replace('/', '_')}-{(source or 'empty')[:12]}"
    pulled = _device(runner, scratch / f"pull-{name}", repo, source)
    runner.output(["ostree", f"--repo={pulled}", "remote", "add", "--no-gpg-verify", "origin",
                   url])
    if source:  # the device's record of what it runs: the delta from there is used
        runner.output(["ostree", f"--repo={pulled}", "refs", f"--create=origin:{ref}", source])
    pull = runner.run(["ostree", f"--repo={pulled}", "pull", "--require-static-deltas",
                       "origin", ref], check=False)
    pull_ok = (pull.returncode == 0 and Repo(pulled, runner).rev_parse(f"origin:{ref}") == head
               and runner.run(["ostree", f"--repo={pulled}", "fsck"], check=False).returncode == 0)
    shutil.rmtree(pulled)
    offline = _device(runner, scratch / f"offline-{name}", repo, source)
    files = repo.parent.parent / "deltas" / ref
    applied = runner.run(["ostree", f"--repo={offline}", "static-delta", "apply-offline",
                          files / path["offline_file"]], check=False)
    offline_ok = (applied.returncode == 0 and Repo(offline, runner).has_commit(head)
                  and runner.run(["ostree", f"--repo={offline}", "fsck"],
                                 check=False).returncode == 0)
    shutil.rmtree(offline)
    return {"ref": ref, "from_commit": source, "pulled": pull_ok, "applied_offline": offline_ok,
            "error": (pull.stderr + applied.stderr).decode(errors="replace")[-400:]}


def apply_checks(build: Path, scratch: Path) -> list[dict[str, Any]]:
    repo = build / "ostree" / "repo"
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(repo)))
    Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        work = [(report, path) for report in _reports(build) for path in report["paths"]]
        with ThreadPoolExecutor(max_workers=2) as pool:
            return list(pool.map(lambda item: _check_path(repo, url, *item, scratch), work))
    finally:
        server.shutdown()
        server.server_close()


def size_checks(build: Path, scratch: Path) -> dict[str, Any]:
    """The adjacent update of microshift-full per architecture against the xdelta3 -9 bound
    and zstd -19 of its changed files."""
    repo = Repo(build / "ostree" / "repo", Runner())
    found = {}
    for report in _reports(build):
        if not report["ref"].endswith("/microshift-full"):
            continue
        update = next(p for p in report["paths"] if p["from_commit"])
        bounds = baselines(repo, update["from_commit"], report["to_commit"], scratch)
        found[report["ref"]] = {
            "delta_bytes": update["delta_bytes"], **bounds,
            "delta_vs_xdelta3": round(update["delta_bytes"] / bounds["xdelta3_bound_bytes"], 3),
            "delta_vs_zstd19": round(update["delta_bytes"] / bounds["zstd19_bytes"], 3)}
    return found


def measure(out: Path) -> dict[str, Any]:
    print("matrix: composing every release, image and architecture (cached)", flush=True)
    build, releases = compose(out)
    _fresh(build)
    print("  cold: deltas --all-images ...", flush=True)
    cold = _deltas(build, releases[-1])
    cold["distinct_parts"] = distinct_parts(build)
    with tempfile.TemporaryDirectory(prefix="matrix-", dir=out) as tmp:
        print("  every delta pulled and applied offline ...", flush=True)
        started = time.monotonic()
        applied = apply_checks(build, Path(tmp))
        apply_seconds = time.monotonic() - started
        print("  sizes against xdelta3 -9 and zstd -19 ...", flush=True)
        sizes = size_checks(build, Path(tmp))
    changed = matrix_release_file(SERIES[SERIES_NAME], len(releases) - 1, out / "cache",
                                  out / "matrix" / "releases", changed=True)
    print(f"  one image changed: {CHANGED_IMAGE} composed again ...", flush=True)
    copy = out / "matrix" / "build-changed"
    shutil.rmtree(copy, ignore_errors=True)
    # Hard links: ostree and the builder replace files by rename, never in place.
    subprocess.run(["cp", "-al", str(build), str(copy)], check=True)
    builder("build-image", "--until", "compose", "--image", CHANGED_IMAGE, "--build-dir", copy,
            release=changed)
    warm = _deltas(copy, changed)
    result = {"benchmark": "matrix", "series": SERIES_NAME, "architectures": list(ARCHES),
              "cold": cold, "applied": applied, "apply_seconds": round(apply_seconds, 1),
              "sizes": sizes, "changed": {"image": CHANGED_IMAGE, **warm}}
    result["checks"] = checks(result)
    return result


def checks(result: dict[str, Any]) -> dict[str, bool]:
    cold, warm = result["cold"]["matrix"], result["changed"]["matrix"]
    updates = [p for p in cold["paths"] if p["from_commit"]]
    found = {
        "24 update paths and 8 from scratch": (len(updates), len(cold["paths"])) == (24, 32),
        "cold matrix within 15 minutes": cold["wall_seconds"] <= TARGETS["cold_wall_seconds"],
        "no part made twice (cold)":
            result["cold"]["distinct_parts"] == cold["totals"]["parts_made"],
        "every delta pulled": all(a["pulled"] for a in result["applied"]),
        "every offline file applied": all(a["applied_offline"] for a in result["applied"]),
        "one image changed: only its refs' deltas made": all(
            p["generated"] == p["ref"].endswith(f"/{CHANGED_IMAGE}") for p in warm["paths"]),
    }
    for ref, size in result["sizes"].items():
        for name in ("delta_vs_xdelta3", "delta_vs_zstd19"):
            found[f"{ref} {name} <= {TARGETS[name]}"] = size[name] <= TARGETS[name]
    return found


def _run_line(run: dict[str, Any]) -> str:
    share = run["cpu_seconds"] / (run["stage_seconds"] * (run["cores"] or 1))
    wall = run["matrix"]["wall_seconds"]
    return (f"{run['stage_seconds']:.0f}s (the stage's own wall {wall:.0f}s), "
            f"{run['cpu_seconds']:.0f} CPU seconds = {share:.0%} of {run['cores']} cores; "
            f"load average {run['load_before']:.1f} before, {run['load_after']:.1f} after")


def report(result: dict[str, Any]) -> str:
    from builder.publish.matrix import matrix_text

    cold, warm = result["cold"], result["changed"]
    lines = [f"cold: `deltas --all-images` {_run_line(cold)}; the deltas hold "
             f"{cold['distinct_parts']} different parts", "", "```",
             matrix_text(cold["matrix"]), "```", "",
             f"one image changed ({warm['image']}): {_run_line(warm)}", "", "```",
             matrix_text(warm["matrix"]), "```", ""]
    for ref, size in result["sizes"].items():
        lines.append(f"{ref}: adjacent update {size['delta_bytes'] / 2**20:.2f} MiB; xdelta3 "
                     f"bound {size['xdelta3_bound_bytes'] / 2**20:.2f} MiB "
                     f"({size['delta_vs_xdelta3']}), zstd -19 "
                     f"{size['zstd19_bytes'] / 2**20:.2f} MiB ({size['delta_vs_zstd19']})")
    bad = [a for a in result["applied"] if not (a["pulled"] and a["applied_offline"])]
    lines.append(f"{len(result['applied']) - len(bad)} of {len(result['applied'])} deltas pulled "
                 f"and applied offline, fsck clean ({result['apply_seconds']:.0f}s)")
    lines += [f"  FAILED {a['ref']} from {(a['from_commit'] or 'empty')[:12]}: {a['error']}"
              for a in bad]
    lines.append("checks: " + ", ".join(f"{k} {'ok' if v else 'FAILED'}"
                                        for k, v in result["checks"].items()))
    return "\n".join(lines)
