"""A full build directory ends in one line naming it, its free space and the step; a rerun
with more space resumes and gives the same outputs as a clean build."""

from __future__ import annotations

import errno
import hashlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.core.diskspace import NoSpaceError, ensure_space, free_bytes, no_space_error
from builder.core.errors import BuildError, ToolError
from builder.core.progress import human_bytes
from tests.support import requires
from tests.support.cli import PROJECT_ROOT, RELEASE


def test_a_tool_that_ran_out_of_space_becomes_one_line(tmp_path: Path) -> None:
    tool = ToolError(["rpm", "-i", "--root", "/x", *["pkg.rpm"] * 200], 1,
                     "error: unpacking of archive failed on file /usr/bin/x: cpio: write "
                     "failed - No space left on device\nsqlite failure: database or disk is full")
    error = no_space_error(tool, tmp_path, "SAMPLE base commit")
    assert error is not None
    assert error.message.startswith(f"no space left in {tmp_path}: ")
    assert " free while SAMPLE base commit (rpm failed)" in error.message
    assert "\n" not in error.message and "pkg.rpm" not in error.message


def test_other_failures_are_left_alone(tmp_path: Path) -> None:
    assert no_space_error(ToolError(["rpm"], 1, "error: bad header"), tmp_path, "x") is None
    assert no_space_error(OSError(errno.EACCES, "denied"), tmp_path, "x") is None
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "f"))
    error = no_space_error(full, tmp_path, "write ISO")
    assert error is not None and f"(writing {tmp_path / 'f'})" in error.message


@pytest.mark.integration
def test_a_tool_whose_helper_died_of_the_full_disk_is_named_the_disks(
        tmp_path: Path, tmpfs: Path) -> None:
    """gpg on a full disk: its agent cannot write, and gpg reports only the broken
    connection, wrapped in the caller's error. With next to nothing free that is the disk's;
    with room left the same failure is left alone."""
    try:
        raise ToolError(["gpg", "--list-secret-keys"], 2,
                        "gpg: error reading key: Connection reset by peer")
    except ToolError as tool:
        wrapped = BuildError("gpg could not list the keys: Connection reset by peer")
        wrapped.__cause__ = tool
    assert no_space_error(wrapped, tmp_path, "signing") is None
    subprocess.run(["dd", "if=/dev/zero", f"of={tmpfs / 'fill'}", "bs=64k"],
                   capture_output=True, check=False)     # until the disk is full
    error = no_space_error(wrapped, tmpfs, "signing")
    assert error is not None and error.message.startswith(f"no space left in {tmpfs}: ")
    assert "while signing (gpg failed)" in error.message


def test_ensure_space_refuses_what_cannot_fit(tmp_path: Path) -> None:
    ensure_space(tmp_path, 1, "a small write")
    free = free_bytes(tmp_path)
    with pytest.raises(NoSpaceError) as refused:
        ensure_space(tmp_path / "not-yet", free + 2**40, "the big step")
    assert refused.value.message == (
        f"no space left in {tmp_path / 'not-yet'}: {human_bytes(free)} free, the big step "
        f"needs about {human_bytes(free + 2**40)}")


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    requires.need_root("mounting a tmpfs")
    mount = tmp_path / "mnt"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1200k", "tmpfs", str(mount)],
                   check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def build_image(build: Path, *extra: str, command: str = "build-image"
                ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "builder", "--release", str(RELEASE),
                           command, "--build-dir", str(build), *extra],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, check=False)


def fingerprint(build: Path) -> dict[str, str]:
    """What must be identical to a clean build: RPMs, repository metadata, commit."""
    files = sorted([*build.glob("rpms/*.rpm"), *build.glob("repo/*/repodata/*")])
    prints = {str(f.relative_to(build)): hashlib.sha256(f.read_bytes()).hexdigest()
              for f in files}
    repo = build / "ostree" / "repo"
    refs = subprocess.run(["ostree", f"--repo={repo}", "refs"], capture_output=True,
                          text=True, check=True).stdout.split()
    for ref in refs:
        prints[ref] = subprocess.run(["ostree", f"--repo={repo}", "rev-parse", ref],
                                     capture_output=True, text=True, check=True).stdout.strip()
    return prints


def no_leftovers(build: Path) -> list[str]:
    return sorted(str(p) for p in build.rglob("*")
                  if p.name.startswith((".tmp-", ".render-", ".gpg-")) or ".tmp" in p.name)


@pytest.mark.integration
def test_full_disk_is_one_line_and_a_rerun_with_more_space_resumes(
        tmpfs: Path, sample_image_build: Path) -> None:
    build = tmpfs / "build"
    # 11000k: room for the SAMPLE base (with its SELinux policy), RPMs and blueprint, not
    # for the compose.
    for size, step in (("1200k", "the SAMPLE base repository"), ("11000k", "the compose")):
        subprocess.run(["mount", "-o", f"remount,size={size}", str(tmpfs)], check=True)
        failed = build_image(build)
        assert failed.returncode == 1, failed.stderr
        error = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
        assert error == [error[0]] and error[0].startswith(f"error: no space left in {build}: ")
        assert step in error[0]
        assert "Traceback" not in failed.stderr
        assert no_leftovers(build) == []
    # The installer has no estimate: fill the disk while it writes the ISO.
    subprocess.run(["mount", "-o", "remount,size=64m", str(tmpfs)], check=True)
    assert build_image(build, "--until", "deltas").returncode == 0
    ballast = tmpfs / "ballast"
    subprocess.run(["fallocate", "-l", str(free_bytes(tmpfs) - 512 * 1024), str(ballast)],
                   check=True)
    failed = build_image(build, "--image", "microshift-full", command="installer")
    assert failed.returncode == 1
    assert f"error: no space left in {build}: " in failed.stderr, failed.stderr
    assert " free while " in failed.stderr and no_leftovers(build) == []
    assert not (build / "installer" / "microshift-full.iso").exists()
    ballast.unlink()
    resumed = build_image(build)
    assert resumed.returncode == 0, resumed.stderr
    assert "unchanged" in resumed.stderr  # the steps before the failure were kept
    assert fingerprint(build) == fingerprint(sample_image_build)  # as a clean build
