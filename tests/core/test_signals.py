"""A cancelled CI job (SIGTERM) ends a run the documented way, and a run killed outright
(SIGKILL) has what it left stopped by the next run in the build directory, which says so."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builder.core.buildlock import HOLDER
from tests.core.test_children import agents_in, start_agent
from tests.support.cli import PROJECT_ROOT, RELEASE

pytestmark = pytest.mark.integration

# Holds the lock of DIR with a gpg-agent in DIR/gpg, as a signing run does, until killed.
HOLD = """
import subprocess, sys
from pathlib import Path
from builder.core.buildlock import build_dir_lock
from builder.core.progress import Progress
build = Path(sys.argv[1])
with build_dir_lock(build, "signing run", Progress()):
    (build / "gpg").mkdir(mode=0o700)
    subprocess.run(["gpg-connect-agent", "--homedir", str(build / "gpg"), "/bye"], check=True,
                   capture_output=True)
    print("held", flush=True)
    sys.stdin.read()
"""


def processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline}")
    return found


def _wait_for_line(proc: subprocess.Popen[str], words: str, seconds: float) -> list[str]:
    assert proc.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 1)
        if ready:
            line = proc.stderr.readline()
            lines.append(line)
            if words in line or not line:
                return lines
    raise AssertionError(f"no {words!r} within {seconds}s: {lines}")


@pytest.mark.parametrize("after", ["==> build-image", "==> compose"])
def test_sigterm_ends_build_image_with_143_one_line_and_nothing_left(
        tmp_path: Path, after: str) -> None:
    build = tmp_path / "build"
    proc = subprocess.Popen([sys.executable, "-m", "builder", "--release", str(RELEASE),
                             "build-image", "--build-dir", str(build)], cwd=PROJECT_ROOT,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        _wait_for_line(proc, after, 600)
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("terminated (SIGTERM)"), err[-2000:]
    assert "Traceback" not in err
    time.sleep(5)
    assert processes_mentioning(str(build)) == []
    assert agents_in(build) == []
    assert not (build / HOLDER).exists()


def test_the_run_after_a_killed_one_stops_its_agent_and_says_so(tmp_path: Path) -> None:
    build = tmp_path / "build"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(build)], cwd=PROJECT_ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    holder.kill()
    holder.wait()
    left = agents_in(build)
    assert left, "the killed run's agent outlives it (what the next run must clean up)"
    # Any command that takes the build directory's lock; this one then fails (no repository).
    proc = subprocess.run([sys.executable, "-m", "builder", "--release", str(RELEASE),
                           "deltas", "--build-dir", str(build)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, check=False)
    assert "which is no longer running" in proc.stderr
    assert f"stopped gpg-agent pid {left[0]} " in proc.stderr
    assert agents_in(build) == []


def test_an_agent_of_a_live_home_elsewhere_is_not_stopped(tmp_path: Path) -> None:
    """The takeover stops only agents whose home is in the build directory."""
    build, other = tmp_path / "build", tmp_path / "elsewhere"
    pid = start_agent(other)
    try:
        holder = subprocess.Popen([sys.executable, "-c", HOLD, str(build)], cwd=PROJECT_ROOT,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        holder.kill()
        holder.wait()
        subprocess.run([sys.executable, "-m", "builder", "--release", str(RELEASE), "deltas",
                        "--build-dir", str(build)], cwd=PROJECT_ROOT, capture_output=True,
                       check=False)
        assert agents_in(other) == [pid]
    finally:
        subprocess.run(["gpgconf", "--homedir", str(other), "--kill", "gpg-agent"],
                       check=False)


# SIGTERM while the CLI's modules load (before its own handler exists): as a cancelled CI
# job sends it to a run that has just started.
EARLY = """
import os, signal, time
import builder.__main__ as entry
entry.answer_sigterm()
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(10)
"""


def test_sigterm_before_the_cli_has_loaded_ends_the_documented_way() -> None:
    proc = subprocess.run([sys.executable, "-c", EARLY], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=30, check=False)
    assert proc.returncode == 143
    assert proc.stderr.splitlines() == [
        "terminated (SIGTERM): the run stopped; a rerun resumes it"]


def test_the_installed_command_answers_sigterm_from_the_start() -> None:
    """`microshift-builder` (pyproject's entry point) goes through the same guard."""
    import tomllib

    scripts = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["microshift-builder"] == "builder.__main__:run"
