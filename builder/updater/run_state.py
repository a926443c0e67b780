"""The updater's records of what it staged and what greenboot rolled back, and the
staging directory: shared by the ostree run (run.py) and the image-mode run (image_run.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

from builder.core.errors import BuildError
from builder.updater.index import CHECKSUM
from builder.updater.state import DamagedState
from builder.updater.status import STATE_DIR

STAGING = STATE_DIR / "staging"
ROLLED_BACK = "rolled-back"  # commits greenboot rolled back here, one per line
# The commit this updater last staged, kept apart from the status: a later run killed on a
# red boot (redboot reboots while it starts) writes "failed" over the status, and the run
# after the rollback must still know what it staged, or it stages it again: a reboot loop.
STAGED = "staged"
FREE_MARGIN = 64 * 1024 * 1024  # left free on /var beside a staged delta file


class Held(Exception):
    """A window is closed, or the rollout's disruption budget has no slot for this device:
    the run stops here, says why (and until when), and is no failure."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def read_commits(path: Path) -> list[str]:
    """A state file of commit checksums, one a line (`rolled-back`, `staged`)."""
    try:
        words = path.read_text().split()
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise DamagedState(path, getattr(exc, "strerror", None) or str(exc)) from None
    if any(not CHECKSUM.match(word) for word in words):
        raise DamagedState(path, "a line is not a commit checksum")
    return words


def _check_space(staging: Path, name: str, size: int) -> None:
    """Room in STAGING for `size` bytes downloaded as `name` (less what its part holds)."""
    staging.mkdir(parents=True, exist_ok=True)
    part = staging / (name + ".part")
    have = part.stat().st_size if part.is_file() else 0
    free = shutil.disk_usage(staging).free
    if free - FREE_MARGIN < size - have:
        raise BuildError(f"{staging}: {free} bytes free, {name} needs "
                         f"{size - have} more (and {FREE_MARGIN} left free)",
                         hint="free space on /var")


def read_staged(path: Path) -> str | None:
    """The commit this updater last staged, or None when it has staged none."""
    words = read_commits(path)
    if len(words) > 1:
        raise DamagedState(path, "more than one commit checksum")
    return words[0] if words else None
