"""Signing the update index's freshness statement (builder/updater/freshness.py).

`deltas` signs one when it signs the index; `publish` signs every published ref's statement
again with the wall clock, so a device's view of the server is never older than the last
publish and a replayed index is refused once its statement expires (DAYS of validity, 7 by
default). A site that publishes once and forgets would strand its devices after the validity:
`publish` again (a timer or a CI schedule) to keep statements fresh.
"""

from __future__ import annotations

import time
from pathlib import Path

from builder.core.errors import BuildError
from builder.core.files import write_atomic
from builder.core.runner import Runner
from builder.core.signing import SigningKey, sign_detached
from builder.updater.freshness import (
    TIMESTAMP,
    TIMESTAMP_SIGNATURE,
    Timestamp,
    parse_timestamp,
    timestamp_for,
)
from builder.updater.index import INDEX
from builder.updater.waves import Rollout

DAY = 24 * 3600


def sign_timestamp(runner: Runner, key: SigningKey, ref_dir: Path, ref: str,
                   validity: int, *, rollout: Rollout | None = None,
                   after: int = 0) -> Timestamp:
    """REF_DIR/timestamp.json{,.sig} for REF_DIR/index.json, issued now (and after `after`:
    a statement that changes a rollout must be newer, to the second, than the one devices
    hold, or they could not tell the two apart). Written under new names and renamed: a
    hard-linked copy of a build's file is never changed in place; the old signature goes
    first, so a failure leaves no statement that verifies."""
    now = max(int(time.time()), after + 1) if after else None
    stamp = timestamp_for(ref, (ref_dir / INDEX).read_bytes(), validity, now, rollout)
    (ref_dir / TIMESTAMP_SIGNATURE).unlink(missing_ok=True)
    write_atomic(ref_dir / TIMESTAMP, stamp.to_json())
    sign_detached(runner, key, ref_dir / TIMESTAMP)
    return stamp


def stale_statements(updates: Path, now: float, margin: int = DAY) -> list[str]:
    """The staged refs whose statement is missing or ends within `margin` seconds: what
    devices will refuse soon after a publish without --gpg-key."""
    stale = []
    for ref, ref_dir in staged_refs(updates):
        try:
            stamp = parse_timestamp((ref_dir / TIMESTAMP).read_bytes(), ref)
        except (OSError, BuildError):
            stale.append(ref)
            continue
        if stamp.expires - now < margin:
            stale.append(ref)
    return stale


def staged_refs(updates: Path) -> list[tuple[str, Path]]:
    """(ref, UPDATES/REF) for every index staged under UPDATES."""
    return [(index.parent.relative_to(updates).as_posix(), index.parent)
            for index in sorted(updates.rglob(INDEX))]
