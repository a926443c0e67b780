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
4. One image changed: microshift-storage is composed again on both architectures with a
   new top layer in its topolvm image; `deltas --all-images` again, with the parts the
   cold run left in the cache: which deltas are kept, which parts are made.
"""

from __future__ import annotations

import json
import shutil
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


def _deltas(build: Path, release: Path) -> tuple[float, dict[str, Any]]:
    seconds = builder("deltas", "--all-images", "--from-count", "3", "--build-dir", build,
                      release=release)
    return seconds, json.loads((build / "deltas" / "matrix.json").read_text())


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
    cold_seconds, cold = _deltas(build, releases[-1])
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
    builder("build-image", "--until", "compose", "--image", CHANGED_IMAGE, "--build-dir", build,
            release=changed)
    warm_seconds, warm = _deltas(build, changed)
    result = {"benchmark": "matrix", "series": SERIES_NAME, "architectures": list(ARCHES),
              "cold": {"stage_seconds": round(cold_seconds, 1), "matrix": cold},
              "applied": applied, "apply_seconds": round(apply_seconds, 1), "sizes": sizes,
              "changed": {"image": CHANGED_IMAGE, "stage_seconds": round(warm_seconds, 1),
                          "matrix": warm}}
    result["checks"] = checks(result)
    return result


def checks(result: dict[str, Any]) -> dict[str, bool]:
    cold, warm = result["cold"]["matrix"], result["changed"]["matrix"]
    updates = [p for p in cold["paths"] if p["from_commit"]]
    found = {
        "24 update paths and 8 from scratch": (len(updates), len(cold["paths"])) == (24, 32),
        "cold matrix within 15 minutes": cold["wall_seconds"] <= TARGETS["cold_wall_seconds"],
        "no part made twice (cold)": all((p["made"] or 0) + (p["shared"] or 0) + (p["cached"] or 0)
                                         == p["parts"] for p in cold["paths"]),
        "every delta pulled": all(a["pulled"] for a in result["applied"]),
        "every offline file applied": all(a["applied_offline"] for a in result["applied"]),
        "one image changed: only its refs' deltas made": all(
            p["generated"] == p["ref"].endswith(f"/{CHANGED_IMAGE}") for p in warm["paths"]),
    }
    for ref, size in result["sizes"].items():
        for name in ("delta_vs_xdelta3", "delta_vs_zstd19"):
            found[f"{ref} {name} <= {TARGETS[name]}"] = size[name] <= TARGETS[name]
    return found


def report(result: dict[str, Any]) -> str:
    from builder.publish.matrix import matrix_text

    cold, warm = result["cold"], result["changed"]
    lines = [f"cold: `deltas --all-images` {cold['stage_seconds']:.0f}s (stage wall "
             f"{cold['matrix']['wall_seconds']:.0f}s)", "", "```", matrix_text(cold["matrix"]),
             "```", "", f"one image changed ({warm['image']}): {warm['stage_seconds']:.0f}s "
             f"(stage wall {warm['matrix']['wall_seconds']:.0f}s)", "", "```",
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
