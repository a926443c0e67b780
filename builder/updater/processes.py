"""The updater's children (ostree, gpg, openssl) end with the run that started them.

Under systemd the unit's control group does it: when microshift-update.service stops, or
its main process dies, systemd stops every process left in the group (KillMode's default).
Outside systemd (an admin's `microshift-update run` in a shell, the device simulation),
a run killed outright would leave its `ostree pull` holding the repository's lock, and the
next run's deploy failed on it. So each child is started through util-linux's
`setpriv --pdeathsig KILL`, which asks the kernel to kill it when the updater dies, however
the updater dies; SIGTERM and SIGINT end the run with one line
(builder/updater/microshift_update.py), and the child that was running is killed before the
run exits.

Where setpriv is missing (a minimal image), children are started plainly: systemd's group
still holds them.

Device side: Python 3.9, standard library only.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.core.errors import MissingToolError, ToolError
from builder.core.runner import Runner, search_path


@functools.lru_cache(maxsize=1)
def death_signal_prefix() -> tuple[str, ...]:
    """`setpriv --pdeathsig KILL --` where this setpriv knows the option (util-linux 2.33
    and later), else nothing."""
    setpriv = shutil.which("setpriv", path=search_path())
    if setpriv is None:
        return ()
    try:
        proc = subprocess.run([setpriv, "--help"], capture_output=True, timeout=10,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return (setpriv, "--pdeathsig", "KILL", "--") if b"--pdeathsig" in proc.stdout else ()


@dataclass
class ChildRunner(Runner):
    """A Runner whose every child is killed by the kernel when the updater dies."""

    def run(self, argv: Sequence[str | os.PathLike[str]], **kwargs: Any
            ) -> subprocess.CompletedProcess[bytes]:
        args = [os.fspath(a) for a in argv]
        prefix = death_signal_prefix()
        if not prefix:
            return super().run(args, **kwargs)
        if shutil.which(args[0], path=search_path()) is None and not Path(args[0]).exists():
            raise MissingToolError(args[0])
        try:
            return super().run([*prefix, *args], **kwargs)
        except ToolError as exc:
            # The command the admin should read is the tool's, not the wrapper's.
            raise ToolError(args, exc.returncode, exc.stderr) from None


def repo_lock_holders(repo: Path, own: int | None = None) -> list[str]:
    """The processes other than `own` that have the repository's lock file open (its
    holders, or waiters for it), as `pid N (command line)`. ostree locks REPO/.lock with
    open file description locks, which /proc/locks lists without a pid: the open file
    is what names the process."""
    lock = repo / ".lock"
    try:
        wanted = lock.stat()
    except OSError:
        return []
    found: list[str] = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == (own or os.getpid()):
            continue
        if _has_open(proc, (wanted.st_dev, wanted.st_ino)):
            found.append(f"pid {proc.name} ({_command(proc)})")
    return found


def _has_open(proc: Path, identity: tuple[int, int]) -> bool:
    try:
        fds = list((proc / "fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            info = fd.stat()
        except OSError:
            continue
        if (info.st_dev, info.st_ino) == identity:
            return True
    return False


def _command(proc: Path) -> str:
    try:
        words = (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    text = " ".join(w.decode(errors="replace") for w in words if w)
    return text if len(text) <= 160 else text[:157] + "..."
