"""No process outlives a run: the GnuPG agents that gpg, rpmsign and ostree start are stopped.

gpg starts a `gpg-agent --homedir HOME --daemon` per GnuPG home on first use and leaves it
running; it detaches, so it is no longer our child and ends with no process group of ours.
Stages stop the agents they know of when they succeed, but a failed run (a full disk, a
bad key) stops halfway, and CI runners collect the leftovers, which also keep a build
directory on a mount busy. So at the end of every run, successful or not, every agent whose
home is one of the build directory's, one the run made, or one the run was given (and the
agent started during the run) is stopped. Agents are found by their home's path, never by
owner or start time alone: another run of the builder on the same host (another user's, or
the same user's) has agents whose temporary homes are gone too, and they are not ours.

Every temporary GnuPG home the builder makes is made by `make_gnupg_home` (or
`temporary_gnupg_home`), which records its real path; a tool that makes its own temporary
home (ostree verifying a signature makes one under $TMPDIR) is run with TMPDIR set to such
a recorded home, so its agent is inside a recorded path as well, even once it is deleted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import MissingToolError
from builder.core.runner import Runner

PROC = Path("/proc")

# The real paths of the temporary GnuPG homes this process made (make_gnupg_home): unique
# (mkdtemp), so an agent whose home is inside one is ours, whether or not it still exists.
_MADE_HOMES: set[Path] = set()
# Told of every home as it is made: the run's reaper (core/reaper.py), which stops the
# agents left in them if the run is killed before it can.
_WATCHERS: list[Callable[[Path], None]] = []


def make_gnupg_home(prefix: str, *, dir: Path | None = None) -> Path:
    """A new, empty GnuPG home (mode 0700) in `dir` (default: the temporary directory),
    recorded so that the run's end stops any agent left in it; the caller deletes it."""
    home = Path(tempfile.mkdtemp(prefix=prefix, dir=dir))
    real = Path(os.path.realpath(home))
    _MADE_HOMES.add(real)
    for watcher in list(_WATCHERS):
        watcher(real)
    home.chmod(0o700)
    return home


@contextlib.contextmanager
def temporary_gnupg_home(prefix: str) -> Iterator[Path]:
    """`make_gnupg_home`, deleted on exit. Run a tool that makes its own temporary GnuPG
    home with `tool_tmpdir(home)` in its environment, so that home is recorded too."""
    home = make_gnupg_home(prefix)
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def tool_tmpdir(home: Path) -> dict[str, str]:
    """The environment for a tool that makes its own temporary GnuPG home under $TMPDIR
    (libostree, verifying a signature): inside `home`, a recorded one."""
    return {"TMPDIR": str(home)}


def made_gnupg_homes() -> frozenset[Path]:
    return frozenset(_MADE_HOMES)


def watch_made_homes(watcher: Callable[[Path], None]) -> None:
    _WATCHERS.append(watcher)


def unwatch_made_homes(watcher: Callable[[Path], None]) -> None:
    with contextlib.suppress(ValueError):
        _WATCHERS.remove(watcher)


@dataclass(frozen=True)
class Agent:
    pid: int
    homedir: Path
    started: float  # seconds since the epoch


def gpg_agents() -> Iterator[Agent]:
    """Every gpg-agent of this user with an explicit --homedir (what gpg starts for one).

    Other users' agents (another user's build or test run) are never ours to stop, and
    their homes may not even be readable."""
    boot = _boot_time()
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if not argv or not argv[0].endswith(b"gpg-agent") or b"--homedir" not in argv:
            continue
        index = argv.index(b"--homedir")
        if index + 1 >= len(argv):
            continue
        # Field 22 of /proc/PID/stat is the start time in clock ticks since boot; fields
        # are counted after the command name, which may hold spaces, in parentheses.
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
        yield Agent(int(entry.name), Path(os.fsdecode(argv[index + 1])),
                    boot + ticks / os.sysconf("SC_CLK_TCK"))


def _boot_time() -> float:
    for line in (PROC / "stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return 0.0


def _inside(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def stop_gpg_agents(runner: Runner, build_dir: Path | None, given_homes: Iterable[Path],
                    run_started: float, *, made: Iterable[Path] | None = None) -> list[Agent]:
    """Stop the agents this run left (see the module docstring); returns them.

    The build directory's GnuPG homes are its direct children (DIR/gpg, DIR/.gpg-*): a build
    directory nested inside it (a benchmark's, under build/bench/) is another run's. A home
    this process made (make_gnupg_home) is ours, gone or not. A GnuPG home the user gave
    (--gpg-homedir) may be their own, with an agent they were using before the run: only an
    agent started during the run is stopped there. `made`: the homes another process made
    (the run's reaper stops what the run left), instead of this process's own.
    """
    build = Path(os.path.realpath(build_dir)) if build_dir is not None else None
    homes = [Path(os.path.realpath(home)) for home in given_homes]
    made = made_gnupg_homes() if made is None else frozenset(made)
    stopped = []
    for agent in gpg_agents():
        during_run = agent.started >= run_started - 1  # start times have 1/100 s ticks
        # A deep home is handed to gpg through a short symlink (signing.gnupg_home).
        home = Path(os.path.realpath(agent.homedir))
        ours = (home.parent == build or _inside(home, made)
                or (during_run and _inside(home, homes)))
        if not ours:
            continue
        if agent.homedir.is_dir():
            with contextlib.suppress(MissingToolError):
                runner.run(["gpgconf", "--homedir", str(agent.homedir), "--kill", "gpg-agent"],
                           check=False)
        _terminate(agent.pid)
        stopped.append(agent)
    _MADE_HOMES.difference_update(home for home in made if not home.exists())  # nothing left
    return stopped


def _terminate(pid: int, grace: float = 2.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds; gone or a zombie counts as stopped."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not _running(pid):
                return
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    try:
        state = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")
