"""ci/stress.py reads each run's outcome from pytest's last line, and a stopped series
stops everything it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.scripts import load_ci_script

SCRIPT = Path(__file__).resolve().parents[2] / "ci" / "stress.py"


@pytest.fixture(scope="module")
def stress() -> ModuleType:
    return load_ci_script("stress")


@pytest.mark.parametrize("line, expected", [
    ("1015 passed in 502.18s (0:08:22)", {"passed": 1015, "failed": 0, "skipped": 0,
                                          "errors": 0}),
    ("3 failed, 1011 passed, 1 skipped, 2 errors in 501.20s",
     {"passed": 1011, "failed": 3, "skipped": 1, "errors": 2}),
    ("1 error in 0.5s", {"passed": 0, "failed": 0, "skipped": 0, "errors": 1}),
])
def test_a_runs_counts_come_from_pytests_summary(stress: ModuleType, line: str,
                                                  expected: dict[str, int]) -> None:
    assert stress.counts(line) == expected


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_stopped_series_leaves_no_load_and_no_suite_running(tmp_path: Path) -> None:
    """CI or an admin stops a series with SIGTERM: the build beside it must stop too, or
    it runs on forever and loads the machine for whatever comes next."""
    pids = tmp_path / "pids"
    slow = tmp_path / "test_slow.py"
    slow.write_text(f"import os, time\n\ndef test_slow():\n"
                    f"    open({str(pids)!r}, 'a').write(f'suite {{os.getpid()}}\\n')\n"
                    f"    time.sleep(600)\n")
    load = f"echo load $$ >> {pids}; sleep 600"
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--runs", "1", "--load", load,
                             "--work", str(tmp_path / "work"), "--", str(slow)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        def started() -> dict[str, int]:
            text = pids.read_text() if pids.is_file() else ""
            return {kind: int(pid) for kind, pid in (line.split() for line in
                                                      text.splitlines())}

        _wait_for(lambda: len(started()) == 2, "the load and the suite to start")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
    running = started()
    _wait_for(lambda: not any(_alive(pid) for pid in running.values()),
              f"the load and the suite to end: {running}")
