"""No gpg-agent outlives a run, failed or not; a user's own agent from before the run stays."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from builder.core.children import gpg_agents, stop_gpg_agents
from builder.core.runner import Runner
from tests.support.cli import RELEASE, run_cli
from tests.support.ostree import copy_build

pytestmark = pytest.mark.integration


def start_agent(home: Path) -> None:
    home.mkdir(mode=0o700, parents=True)
    subprocess.run(["gpg-connect-agent", "--homedir", str(home), "/bye"], check=True,
                   capture_output=True)
    assert agents_in(home)


def agents_in(root: Path) -> list[int]:
    return [a.pid for a in gpg_agents() if a.homedir == root or root in a.homedir.parents]


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
    assert {a.homedir for a in stopped} == {build / "gpg", user_home.with_name("release-key")}
    assert agents_in(build / "gpg") == [] and agents_in(user_home.with_name("release-key")) == []
    assert agents_in(user_home)  # not ours to stop
    assert agents_in(nested)
    for home in (user_home, nested):
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)


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
