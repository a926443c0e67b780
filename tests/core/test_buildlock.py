"""One run per build directory: a second run is refused at once, or queues with --wait."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from builder.core.buildlock import HOLDER, BusyError, build_dir_lock, read_holder
from builder.core.progress import Progress
from tests.support import requires
from tests.support.cli import PROJECT_ROOT, RELEASE, run_cli

# Holds the lock of DIR for as long as it reads nothing on stdin, then exits.
HOLD = """
import sys
from pathlib import Path
from builder.core.buildlock import build_dir_lock
from builder.core.progress import Progress
with build_dir_lock(Path(sys.argv[1]), "holder command", Progress()):
    print("held", flush=True)
    sys.stdin.read()
"""


def hold(build: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(build)], cwd=PROJECT_ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def test_second_run_is_refused_at_once_naming_the_holder(tmp_path: Path) -> None:
    build = tmp_path / "build"
    holder = hold(build)
    try:
        started = time.monotonic()
        with pytest.raises(BusyError) as refused, \
                build_dir_lock(build, "second", Progress(stream=io.StringIO())):
            pass
        # At once: milliseconds; a run that waited would try again after 30 s.
        assert time.monotonic() - started < 25
        assert refused.value.exit_code == 3
        assert f"build directory {build} is in use by pid {holder.pid} (`holder command`, " \
               "started " in refused.value.message
    finally:
        holder.communicate("")
    assert holder.returncode == 0


def test_wait_queues_behind_the_holder_and_says_so(tmp_path: Path) -> None:
    build = tmp_path / "build"
    holder = hold(build)
    out = io.StringIO()
    told_to_release = threading.Event()

    def release_holder() -> None:
        told_to_release.set()
        holder.communicate("")

    timer = threading.Timer(1.0, release_holder)
    timer.start()
    try:
        with build_dir_lock(build, "second", Progress(stream=out), wait=True, poll=0.05):
            assert told_to_release.is_set()  # it got the lock only after the holder let go
            holder_now = read_holder(build)
            assert holder_now is not None and holder_now.pid == os.getpid()
    finally:
        timer.join()
    assert holder.returncode == 0
    assert f"waiting for pid {holder.pid} (`holder command`" in out.getvalue()


def test_lock_of_a_killed_run_is_taken_over(tmp_path: Path) -> None:
    build = tmp_path / "build"
    holder = hold(build)
    holder.kill()
    holder.wait()
    assert read_holder(build) is not None  # its record stays behind, its flock does not
    out = io.StringIO()
    with build_dir_lock(build, "next", Progress(stream=out)):
        pass
    assert f"left by pid {holder.pid}" in out.getvalue()
    assert "which is no longer running" in out.getvalue()
    assert not (build / HOLDER).exists()


def test_a_refused_run_leaves_no_build_directory(tmp_path: Path) -> None:
    build = tmp_path / "never"
    bad = tmp_path / "release.yaml"
    bad.write_text("version: [1]\n")
    assert run_cli("--release", bad, "rpms", "--build-dir", build) == 2
    assert not build.exists()


def test_an_existing_build_directory_keeps_its_content(tmp_path: Path) -> None:
    build = tmp_path / "build"
    build.mkdir()
    (build / "keep").write_text("x")
    with build_dir_lock(build, "run", Progress(stream=io.StringIO())):
        assert json.loads((build / HOLDER).read_text())["command"] == "run"
    assert sorted(p.name for p in build.iterdir()) == ["keep"]


@pytest.mark.integration
@requires.root_only("build-image composes, which runs rpm --root")
def test_two_concurrent_build_image_runs(tmp_path: Path) -> None:
    build = tmp_path / "build"
    # Up to the RPMs: long enough for the second run to find the first holding the lock.
    argv = [sys.executable, "-m", "builder", "--release", str(RELEASE), "build-image",
            "--build-dir", str(build), "--until", "rpms"]
    first = subprocess.Popen(argv, cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while read_holder(build) is None or read_holder(build).pid != first.pid:
        assert first.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    second = subprocess.run(argv, cwd=PROJECT_ROOT, capture_output=True, text=True,
                            timeout=30, check=False)
    assert second.returncode == 3
    assert f"error: build directory {build} is in use by pid {first.pid} " in second.stderr
    assert "Traceback" not in second.stderr
    waiting = subprocess.Popen([*argv, "--wait"], cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    _, first_err = first.communicate(timeout=600)
    assert first.returncode == 0, first_err
    _, waiting_err = waiting.communicate(timeout=600)
    assert waiting.returncode == 0, waiting_err
    assert f"waiting for pid {first.pid}" in waiting_err
    assert "unchanged" in waiting_err  # it ran after the first, on the first's outputs
