"""A child the updater started dies with the updater, however the updater dies: a `kill -9`
of a shell admin's run must not leave its ostree pull holding the repository's lock.

Integration tier: a real process running ChildRunner, killed with SIGKILL, and util-linux's
setpriv.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builder.updater.processes import death_signal_prefix, repo_lock_holders

pytestmark = pytest.mark.integration

UPDATER = """
import sys
from builder.updater.processes import ChildRunner
ChildRunner().run([sys.executable, "-c", "import time; time.sleep(600)"])
"""


def _children_of(pid: int) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(proc.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_this_setpriv_knows_the_death_signal() -> None:
    assert death_signal_prefix()[1:] == ("--pdeathsig", "KILL", "--")


def test_a_child_dies_when_its_updater_is_killed() -> None:
    """A child sleeping 600 s would outlive a killed parent by ten minutes; it is gone at once."""
    updater = subprocess.Popen([sys.executable, "-c", UPDATER],
                               cwd=Path(__file__).parents[2])
    try:
        deadline = time.monotonic() + 30
        while not (children := _children_of(updater.pid)):
            assert time.monotonic() < deadline, "the updater never started its child"
            time.sleep(0.05)
        os.kill(updater.pid, signal.SIGKILL)
        updater.wait(timeout=30)
        deadline = time.monotonic() + 5
        while _alive(children[0]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(children[0])
    finally:
        updater.kill()
        updater.wait()


def test_the_lock_s_holders_are_named_by_pid_and_command(tmp_path: Path) -> None:
    (tmp_path / ".lock").write_bytes(b"")
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              stdin=(tmp_path / ".lock").open("rb"))
    try:
        deadline = time.monotonic() + 10
        while not (holders := repo_lock_holders(tmp_path)):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert holders == [f"pid {holder.pid} ({sys.executable} -c import time; "
                           "time.sleep(60))"]
    finally:
        holder.kill()
        holder.wait()
    assert repo_lock_holders(tmp_path / "missing") == []
