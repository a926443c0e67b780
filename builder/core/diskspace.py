"""Free space in the build directory: checked before big writes, named when it runs out.

Two guards. Before a stage that writes a lot, `ensure_space` compares what it expects to
write (estimated from its inputs) with what the file system has free, and refuses to start
when it cannot fit. And whatever runs out of space anyway (an estimate is an estimate; other
jobs share the disk), `no_space_error` turns the failure, a Python OSError or a tool's
"No space left on device", into one line that names the directory, the free space and the
step that was writing, instead of a tool's command line and its stderr.

Steps write into temporary directories and rename them into place when complete, so a run
that stops here leaves nothing half-written, and a rerun with more space resumes.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from builder.core.errors import BuildError, ToolError
from builder.core.progress import human_bytes

MiB = 1024 * 1024
ALMOST_FULL = 256 * 1024   # free bytes under which a tool's failure is taken as the disk's
# What tools print when the disk is full: the kernel's strerror (rpm, cp, ostree, gpg),
# sqlite's (the rpm database), EDQUOT's, and xorriso's own check before it writes.
FULL_RE = re.compile(r"No space left on device|database or disk is full|Disk quota exceeded|"
                     r"ENOSPC|exceeds free space on media", re.IGNORECASE)


class NoSpaceError(BuildError):
    """The build directory's file system is (or would be) full."""


def free_bytes(path: Path) -> int:
    """Bytes available to this user on the file system that holds `path` (or would)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    stat = os.statvfs(probe)
    return stat.f_bavail * stat.f_frsize


def ensure_space(path: Path, needed: int, what: str) -> None:
    """Refuse to start `what` when `path`'s file system has less than `needed` bytes free."""
    free = free_bytes(path)
    if free < needed:
        raise NoSpaceError(
            f"no space left in {path}: {human_bytes(free)} free, {what} needs about "
            f"{human_bytes(needed)}",
            hint="free some space or use a --build-dir on a larger file system; a rerun "
                 "resumes where this one stopped")


def is_disk_full(exc: BaseException, build_dir: Path | None = None) -> bool:
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    tool = exc if isinstance(exc, ToolError) else exc.__cause__
    if not isinstance(tool, ToolError):
        return False
    if FULL_RE.search(tool.stderr):
        return True
    # A helper of the tool that died of the full disk (gpg's agent, unable to write its
    # socket or key files) leaves the tool only a broken connection to report: a tool's
    # failure with next to nothing free in the build directory is the disk's.
    return build_dir is not None and free_bytes(build_dir) < ALMOST_FULL


def no_space_error(exc: BaseException, build_dir: Path, step: str) -> NoSpaceError | None:
    """The one-line error for a failure caused by a full disk; None for any other failure."""
    if isinstance(exc, NoSpaceError) or not is_disk_full(exc, build_dir):
        return None
    doing = f" while {step}" if step else ""
    what = ""
    tool = exc if isinstance(exc, ToolError) else exc.__cause__
    if isinstance(tool, ToolError):
        what = f" ({tool.argv[0]} failed)"
    elif isinstance(exc, OSError) and exc.filename:
        what = f" (writing {exc.filename})"
    return NoSpaceError(
        f"no space left in {build_dir}: {human_bytes(free_bytes(build_dir))} free{doing}{what}",
        hint="free some space or use a --build-dir on a larger file system; nothing was left "
             "half-written and a rerun resumes where this one stopped")
