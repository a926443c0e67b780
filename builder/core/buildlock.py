"""One run per build directory: an exclusive lock held for the whole command.

The lock is `flock` on the build directory itself, so the kernel releases it when the
holder dies, however it dies: a lock left by a killed run is simply free, and the next run
takes it over (and says so). Who holds it is recorded beside it in DIR/.lock.json (pid,
command, start time) so that a second run can name the holder in its one-line refusal.

A build directory that did not exist before the run and holds nothing but the record at
the end is removed again: a run refused on bad input leaves no trace.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import BuildError
from builder.core.progress import Progress

HOLDER = ".lock.json"
WAIT_REPORT_SECONDS = 30.0


class BusyError(BuildError):
    """The build directory is in use by another run."""

    exit_code = 3


@dataclass(frozen=True)
class Holder:
    pid: int
    command: str
    started: float

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return f"pid {self.pid} (`{self.command}`, started {when})"


def read_holder(build_dir: Path) -> Holder | None:
    try:
        data = json.loads((build_dir / HOLDER).read_text())
        return Holder(int(data["pid"]), str(data["command"]), float(data["started"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def build_dir_lock(build_dir: Path, command: str, progress: Progress, *,
                   wait: bool = False, poll: float = 0.2,
                   on_takeover: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold the build directory's lock for the `with` block (see the module docstring);
    `on_takeover` runs when the previous holder died without releasing it."""
    created = not build_dir.exists()
    fd = _acquire(build_dir, command, progress, wait=wait, poll=poll)
    try:
        stale = read_holder(build_dir)
        if stale is not None and stale.pid != os.getpid() and not _alive(stale.pid):
            progress.info(f"took over the lock of {build_dir} left by {stale.describe()}, "
                          "which is no longer running")
            if on_takeover is not None:
                on_takeover()
        _write_holder(build_dir, command)
        yield
    finally:
        with contextlib.suppress(OSError):
            (build_dir / HOLDER).unlink()
        if created:
            with contextlib.suppress(OSError):
                build_dir.rmdir()  # only when empty: the run wrote nothing
        os.close(fd)


def _acquire(build_dir: Path, command: str, progress: Progress, *, wait: bool,
             poll: float) -> int:
    waited_since = time.monotonic()
    reported: float | None = None
    while True:
        build_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(build_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            holder = read_holder(build_dir)
            who = holder.describe() if holder else "another run"
            if not wait:
                raise BusyError(f"build directory {build_dir} is in use by {who}",
                                hint="wait for it to finish, pass --wait to queue behind "
                                     "it, or use another --build-dir") from exc
            now = time.monotonic()
            if reported is None or now - reported >= WAIT_REPORT_SECONDS:
                progress.info(f"waiting for {who} to release {build_dir} "
                              f"({now - waited_since:.0f}s so far)")
                reported = now
            time.sleep(poll)
            continue
        # The directory may have been removed (an empty one, by a refused run) and made
        # anew while we waited: a lock on the old inode protects nothing.
        if _same_inode(fd, build_dir):
            return fd
        os.close(fd)


def _same_inode(fd: int, path: Path) -> bool:
    try:
        held, current = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (current.st_dev, current.st_ino)


def _write_holder(build_dir: Path, command: str) -> None:
    record = {"pid": os.getpid(), "command": command, "started": time.time()}
    tmp = build_dir / f".{HOLDER}.{os.getpid()}"
    tmp.write_text(json.dumps(record, sort_keys=True) + "\n")
    os.replace(tmp, build_dir / HOLDER)
