"""No gpg-agent outlives a run, failed or not; a user's own agent from before the run stays,
and so does another run's (found by its home's path, never by owner or start time)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from builder.core.children import (
    Agent,
    gpg_agents,
    made_gnupg_homes,
    make_gnupg_home,
    stop_gpg_agents,
    temporary_gnupg_home,
    tool_tmpdir,
)
from builder.core.runner import Runner
from tests.support.cli import RELEASE, run_cli
from tests.support.deltas import signed_delta
from tests.support.ostree import copy_build

pytestmark = pytest.mark.integration


def start_agent(home: Path) -> int:
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    subprocess.run(["gpg-connect-agent", "--homedir", str(home), "/bye"], check=True,
                   capture_output=True)
    pids = agents_in(home)
    assert pids
    return pids[0]


def agents_in(root: Path) -> list[int]:
    return [a.pid for a in gpg_agents() if a.homedir == root or root in a.homedir.parents]


def running(pid: int) -> bool:
    return any(agent.pid == pid for agent in gpg_agents())


def stopped_under(root: Path, stopped: list[Agent]) -> set[Path]:
    """The homes of the stopped agents under `root`: this test's (the same process may hold
    homes of other tests' runs, made through the helper, whose agents are stopped too)."""
    return {a.homedir for a in stopped if root in a.homedir.parents}


def test_agents_of_the_build_dir_and_of_the_run_are_stopped(tmp_path: Path) -> None:
    user_home = tmp_path / "user-gnupg"
    start_agent(user_home)  # the user's agent, running before the run
    time.sleep(1.1)
    started = time.time()
    build = tmp_path / "build"
    start_agent(build / "gpg")
    nested = build / "n" / "gpg"  # a build directory inside it: another run's
    start_agent(nested)
    start_agent(user_home.with_name("release-key"))
    stopped = stop_gpg_agents(Runner(), build, [user_home, user_home.with_name("release-key")],
                              started)
    assert stopped_under(tmp_path, stopped) == {build / "gpg", user_home.with_name("release-key")}
    assert agents_in(build / "gpg") == [] and agents_in(user_home.with_name("release-key")) == []
    assert agents_in(user_home)  # not ours to stop
    assert agents_in(nested)
    for home in (user_home, nested):
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)


def vanish(home: Path, away: Path) -> None:
    """The home's path is gone while its agent runs on (a deleted home's agent notices when
    its socket is in that home; moving the home away keeps it running for the test)."""
    home.parent.rename(away)
    assert not home.exists()


def test_only_a_vanished_home_the_run_made_has_its_agent_stopped(tmp_path: Path) -> None:
    started = time.time()
    # Another run on this host (another user's builder, or the same user's next door) made a
    # temporary home, started an agent in it during our run, and its home is gone.
    # (Short names: a GnuPG home's agent sockets must fit in 107 bytes.)
    theirs = tmp_path / "t" / "g"
    their_agent = start_agent(theirs)
    vanish(theirs, tmp_path / "their-gone")
    # This run made one through the helper (as ostree's verification does), and a step that
    # failed halfway left its agent running when the home went.
    ours = make_gnupg_home("o-", dir=tmp_path) / "g"
    our_agent = start_agent(ours)
    vanish(ours, tmp_path / "our-gone")
    try:
        stopped = stop_gpg_agents(Runner(), None, [], started)
        assert stopped_under(tmp_path, stopped) == {ours}
        assert not running(our_agent)
        assert running(their_agent)  # not ours to stop, though its home is gone too
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(their_agent, signal.SIGTERM)


def test_ostree_verifies_in_a_gnupg_home_the_run_made(tmp_path: Path) -> None:
    """ostree makes its own temporary GnuPG home under $TMPDIR to verify a signature; run
    with tool_tmpdir, that home is inside one the run made and recorded, so an agent ostree
    left there would be found by path."""
    signed, public, _ = signed_delta(tmp_path / "signed")
    check = tmp_path / "check"
    subprocess.run(["ostree", f"--repo={check}", "init", "--mode=archive"], check=True)
    subprocess.run(["ostree", f"--repo={check}", "remote", "add", "--set=gpg-verify=true",
                    f"--set=gpgkeypath={public}", "check", f"file://{signed.repo}"], check=True)

    def verify(env: dict[str, str]) -> int:
        return subprocess.run(["ostree", f"--repo={check}", "pull", "--commit-metadata-only",
                               "check", signed.new], env={**os.environ, **env},
                              capture_output=True, check=False).returncode

    with temporary_gnupg_home("verify-") as scratch:
        assert Path(os.path.realpath(scratch)) in made_gnupg_homes()
        assert scratch.stat().st_mode & 0o777 == 0o700
        assert verify(tool_tmpdir(scratch / "missing")) != 0  # no $TMPDIR, no GnuPG home
        assert verify(tool_tmpdir(scratch)) == 0
    assert not scratch.exists()


def test_a_failed_run_leaves_no_agent(built_release: Path, tmp_path: Path) -> None:
    build = copy_build(built_release, tmp_path / "build")
    assert run_cli("--release", RELEASE, "blueprint", "--image", "microshift-full",
                   "--build-dir", build) == 0
    # compose makes the SAMPLE key (gpg starts an agent), then refuses an RPM that changed
    # after depsolve: the run fails halfway.
    rpm = next((build / "repo" / "x86_64" / "Packages").glob("microshift-core-*.rpm"))
    data = rpm.read_bytes()
    rpm.unlink()  # a hard link into the step cache: replace it, never write through it
    rpm.write_bytes(data + b"tampered")
    assert run_cli("--release", RELEASE, "compose", "--build-dir", build) == 1
    assert (build / "gpg" / "pubring.kbx").is_file()
    assert agents_in(build) == []


KILLED_RUN = """
import os, signal, subprocess, sys, time
from pathlib import Path
from builder.core.children import make_gnupg_home
from builder.core.reaper import Reaper
build = Path(sys.argv[1])
reaper = Reaper(build, [], time.time())
for home in (build / "gpg", make_gnupg_home("r", dir=build) / "g"):
    home.mkdir(mode=0o700)
    subprocess.run(["gpg-connect-agent", "--homedir", str(home), "/bye"], check=True,
                   capture_output=True)
print("agents up", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_run_killed_with_sigkill_leaves_no_agent_five_seconds_later() -> None:
    """The run's reaper reads end-of-file when the kernel closes the killed run's pipe, and
    stops the agents of the build directory's home and of a home the run made (told to it
    while the run went on). A kill -9 runs no `finally` in the run itself."""
    # A short directory: a GnuPG home's agent sockets must fit in 107 bytes, and a pytest
    # worker's tmp_path is deep.
    build = Path(tempfile.mkdtemp(prefix="b-", dir="/tmp"))
    try:
        _killed_run_leaves_nothing(build)
    finally:
        shutil.rmtree(build, ignore_errors=True)


def _killed_run_leaves_nothing(build: Path) -> None:
    run = subprocess.run([sys.executable, "-c", KILLED_RUN, str(build)], capture_output=True,
                         text=True, timeout=60, check=False)
    assert run.returncode == -signal.SIGKILL and "agents up" in run.stdout, run.stderr
    deadline = time.monotonic() + 5
    while agents_in(build) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = agents_in(build)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == []
