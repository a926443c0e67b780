"""The test suite, several times in a row, while a CPU-heavy build runs beside it (`nox -s
stress`): a test that passes only on a quiet machine has a timing race (docs/testing.md).

    python ci/stress.py              # 5 runs; stops at the first that fails
    python ci/stress.py --runs 2 -- tests/device   # pytest arguments after --

Beside the suite, `python -m builder build-image` of the sample release runs again and again
into a fresh directory (build/stress/load). Each run's log is build/stress/run-N.log;
build/stress/report.json records the commit, every run's outcome (passed, failed, skipped,
errors, seconds) and the load average at its end. Exit 0 when every run passed; as on CI
(BUILDER_NO_TOOL_SKIPS=1), a skip for a missing tool is a failure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "build" / "stress"
COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)")


def build_image(work: Path) -> str:
    """The default load: build-image into a fresh directory."""
    load = work / "load"
    return (f'rm -rf "{load}"; "{sys.executable}" -m builder build-image '
            f'--build-dir "{load}"')


def start_load(work: Path, command: str) -> subprocess.Popen[bytes]:
    """The command over and over, in its own process group (stop_load ends all of it)."""
    script = f'while true; do {command}; done >> "{work / "load.log"}" 2>&1'
    return subprocess.Popen(["bash", "-c", script], cwd=ROOT, start_new_session=True)


def stop_load(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def counts(summary: str) -> dict[str, int]:
    """pytest's last line, e.g. '3 failed, 1012 passed, 1 skipped in 501.2s', as numbers."""
    found = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    for number, kind in COUNTS.findall(summary):
        key = "errors" if kind.startswith("error") else kind
        found[key] = found.get(key, 0) + int(number)
    return found


def run_suite(work: Path, index: int, pytest_args: list[str]) -> dict[str, Any]:
    log = work / f"run-{index}.log"
    env = {**os.environ, "BUILDER_NO_TOOL_SKIPS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               *pytest_args], cwd=ROOT, env=env, stdout=out,
                              stderr=subprocess.STDOUT, check=False)
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return {"run": index, "returncode": proc.returncode, **counts(last),
            "seconds": round(time.monotonic() - started, 1),
            "loadavg": [round(x, 2) for x in os.getloadavg()], "summary": last.strip("= ")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-load", action="store_true", help="no build beside the suite")
    parser.add_argument("--load", metavar="COMMAND",
                        help="a shell command to run in a loop beside the suite instead of "
                             "build-image of the sample release")
    parser.add_argument("--work", type=Path, default=WORK,
                        help=f"logs and report.json (default: {WORK.relative_to(ROOT)})")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    # A stopped series (SIGTERM from CI or `kill`) ends its pytest and its load too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    work: Path = args.work.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True, check=False).stdout.strip()
    command = args.load or build_image(work)
    report: dict[str, Any] = {"commit": commit, "load": None if args.no_load else
                              args.load or "python -m builder build-image (sample release), "
                              "in a loop", "runs": []}
    load = None if args.no_load else start_load(work, command)
    try:
        for index in range(1, args.runs + 1):
            result = run_suite(work, index, args.pytest_args)
            report["runs"].append(result)
            (work / "report.json").write_text(json.dumps(report, indent=2) + "\n")
            print(f"run {index}/{args.runs}: {result['summary']} (load average "
                  f"{result['loadavg'][0]})", flush=True)
            if result["returncode"] != 0:
                print(f"run {index} failed: see {work / f'run-{index}.log'}")
                return 1
    finally:
        if load is not None:
            stop_load(load)
    print(f"{args.runs} runs in a row passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
