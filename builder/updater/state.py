"""The updater's state files under /var/lib/microshift-update: written so that a power loss
or a full disk never leaves half a file, and read so that a damaged one stops the updater
instead of being taken for an empty one.

Writes go to NAME.new, are fsynced, renamed over NAME, and the directory is fsynced: after
a crash the file is the old one or the new one, whole. A file that is there but does not
parse (damaged by something else: a bad block, a hand edit) refuses every update with one
line naming it and `microshift-update reset-state`, which moves damaged files aside: read
as empty, the newest statement accepted (accepted-index.json) would be forgotten and a
replayed older one accepted, and a rolled-back commit (rolled-back) staged again.

The run lock (`lock`, flock) keeps two runs (the timer's and an admin's) apart; `tmp/` is
the runs' scratch space (GnuPG homes, the commit check's repository), emptied when a run
starts, so a killed run's leftovers go with the next one.

Device side: Python 3.9, standard library only.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from builder.core.bounded_json import BadDocument, parse
from builder.core.errors import BuildError

LOCK = "lock"
SCRATCH = "tmp"
FLAG = "damaged"      # the one line of the damage found, until reset-state removes it
MAX_STATE = 1024 * 1024
RESET = "microshift-update reset-state"


class DamagedState(BuildError):
    """A state file that is there and does not parse: no update until it is reset."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path} is damaged ({problem}): no update runs while the "
                         "updater cannot trust what it recorded",
                         hint=f"`{RESET}` moves it aside (its content is kept beside it)")
        self.path = path


class Busy(BuildError):
    """Another run holds the lock."""


def write_atomic(path: Path, data: bytes | str) -> None:
    payload = data.encode() if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".new")
    with tmp.open("wb") as handle:
        handle.write(payload)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    sync_dir(path.parent)


def sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_json(path: Path, check: Callable[[Any], object] | None = None) -> Any:
    """The JSON document in `path`; None when there is no such file; DamagedState when it
    does not parse or `check` raises BadDocument (or returns False) on it."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DamagedState(path, exc.strerror or str(exc)) from None
    try:
        document = parse(data, path.name, limit=MAX_STATE)
        if check is not None and check(document) is False:
            raise BadDocument(path.name, "", "is not what the updater writes")
    except BadDocument as exc:
        raise DamagedState(path, exc.problem if not exc.field else
                           f"{exc.field} {exc.problem}") from None
    return document


@contextmanager
def run_lock(state: Path) -> Iterator[None]:
    """Held for a whole run; a second run stops at once, naming the holder."""
    state.mkdir(parents=True, exist_ok=True)
    handle = (state / LOCK).open("a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise Busy(f"another microshift-update run is going on ({holder})",
                       hint="it ends by its run_deadline_seconds; this run changed "
                            "nothing") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        handle.flush()
        yield
    finally:
        handle.close()


def fresh_scratch(state: Path) -> Path:
    """The runs' scratch directory, emptied (call it under the run lock)."""
    scratch = state / SCRATCH
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(mode=0o700, parents=True, exist_ok=True)
    return scratch


def flag_damage(state: Path, damage: DamagedState) -> str:
    """Keep the damaged file (moved aside) and the refusal (the flag) until an admin runs
    reset-state; the line to show."""
    line = str(damage)
    if damage.path.exists():
        kept = move_aside(damage.path, time.time())
        line = f"{line}; kept as {kept.name}"
    if not (state / FLAG).exists():
        write_atomic(state / FLAG, line + "\n")
    return line


def check_flag(state: Path) -> None:
    """Refuse while damage found by an earlier run is not reset."""
    try:
        text = (state / FLAG).read_text(errors="replace").strip()
    except FileNotFoundError:
        return
    except OSError as exc:
        text = f"{state / FLAG}: {exc.strerror}"
    first = text.splitlines()[0] if text else "damaged state"
    raise BuildError(first.split(" (hint: ")[0],
                     hint=f"`{RESET}` once the state directory has been looked at")


def move_aside(path: Path, now: float) -> Path:
    """Keep a damaged file's bytes for a look, out of the updater's way."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    target = path.with_name(f"{path.name}.damaged-{stamp}")
    os.replace(path, target)
    sync_dir(path.parent)
    return target
