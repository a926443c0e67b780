"""The collector's state: devices, their verdicts and what was refused, in SQLite.

WAL mode with synchronous=FULL: a verdict is recorded in one transaction that is on disk
before the device is answered, so a collector killed with SIGKILL (or a machine losing
power) keeps every verdict it answered 201; one it had not answered, the device still has
in its outbox and sends again.

Trust: a device's public key and labels are pinned to its machine id the first time a
verdict of it arrives (trust on first use), or ahead of that by `rollout enroll`; with
`enrolled_only` the collector takes verdicts of enrolled devices only. The labels decide,
with the device's place, which wave it is in: a verdict for another wave, or for a wave that
is not open, is refused (builder/rollout/verdict_check.py `check_wave`), and so is a device's
verdict past `max_verdicts` for one rollout.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from builder.core.errors import BuildError
from builder.rollout import history
from builder.rollout.verdict_check import Refused, Verdict, check_wave
from builder.updater.waves import Rollout

SCHEMA = """
CREATE TABLE IF NOT EXISTS devices (
    machine_id TEXT PRIMARY KEY, public_key TEXT NOT NULL, enrolled INTEGER NOT NULL,
    first_seen INTEGER NOT NULL, last_seq INTEGER NOT NULL DEFAULT -1, labels TEXT);
CREATE TABLE IF NOT EXISTS verdicts (
    digest TEXT PRIMARY KEY, machine_id TEXT NOT NULL, seq INTEGER NOT NULL,
    time INTEGER NOT NULL, received INTEGER NOT NULL, ref TEXT NOT NULL,
    rollout TEXT NOT NULL, commit_id TEXT NOT NULL, wave INTEGER NOT NULL,
    event TEXT NOT NULL, from_commit TEXT NOT NULL, from_version TEXT NOT NULL,
    version TEXT NOT NULL, boots INTEGER NOT NULL, failed_check TEXT NOT NULL,
    held_reason TEXT NOT NULL DEFAULT '', held_since INTEGER NOT NULL DEFAULT 0,
    failed_log TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS verdicts_rollout ON verdicts (rollout, commit_id);
CREATE INDEX IF NOT EXISTS verdicts_device ON verdicts (machine_id, rollout, commit_id);
CREATE TABLE IF NOT EXISTS refusals (reason TEXT PRIMARY KEY, count INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS grants (
    rollout TEXT NOT NULL, commit_id TEXT NOT NULL, machine_id TEXT NOT NULL,
    granted INTEGER NOT NULL, PRIMARY KEY (rollout, commit_id, machine_id));
CREATE TABLE IF NOT EXISTS notes (name TEXT PRIMARY KEY, text TEXT NOT NULL,
    since INTEGER NOT NULL);
"""
# Columns added since the first collector: (table, column, its definition).
ADDED = (("devices", "labels", "TEXT"),
         ("verdicts", "held_reason", "TEXT NOT NULL DEFAULT ''"),
         ("verdicts", "held_since", "INTEGER NOT NULL DEFAULT 0"),
         ("verdicts", "failed_log", "TEXT NOT NULL DEFAULT ''"))
REACHED = {  # a device's furthest event -> the columns of `rollout status` it counts in
    "offered": ("offered",), "downloaded": ("offered", "downloaded"),
    "staged": ("offered", "downloaded", "staged"),
    "green": ("offered", "downloaded", "staged", "green"),
    "rolled-back": ("offered", "downloaded", "staged", "rolled_back"),
}
DUPLICATE = "duplicate"
ORDER = ("offered", "downloaded", "staged", "green", "rolled-back")
MAX_VERDICTS = 200   # per device and rollout: a run every hour for a week, and more


@dataclass
class WaveCounts:
    offered: int = 0
    downloaded: int = 0
    staged: int = 0
    green: int = 0
    rolled_back: int = 0
    failed_checks: dict[str, int] = field(default_factory=dict)

    @property
    def silent(self) -> int:
        """Offered, and no verdict on the new release yet."""
        return self.offered - self.green - self.rolled_back


class Store:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.execute("PRAGMA busy_timeout=10000")
            self.db.executescript(SCHEMA + history.SCHEMA)
            for table, column, definition in ADDED:  # a database of an older collector
                columns = {row[1] for row in self.db.execute(f"PRAGMA table_info({table})")}
                if column not in columns:
                    self.db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")
        except sqlite3.DatabaseError as exc:
            raise BuildError(f"{path}: not a rollout database ({exc})") from exc
        self.path = path

    def close(self) -> None:
        self.db.close()

    def refuse(self, reason: str) -> None:
        self.db.execute("INSERT INTO refusals VALUES (?, 1) ON CONFLICT(reason) DO UPDATE "
                        "SET count = count + 1", (reason,))

    def refusals(self) -> dict[str, int]:
        return dict(self.db.execute("SELECT reason, count FROM refusals WHERE reason != ? "
                                    "ORDER BY reason", (DUPLICATE,)))

    def duplicates(self) -> int:
        row = self.db.execute("SELECT count FROM refusals WHERE reason = ?",
                              (DUPLICATE,)).fetchone()
        return int(row[0]) if row else 0

    def enroll(self, machine_id: str, public_key: str,
               labels: dict[str, str] | None = None) -> None:
        """Pin the key (and, when given, the labels) of a device ahead of its verdicts."""
        pinned = None if labels is None else _labels_text(labels)
        self.db.execute("INSERT INTO devices (machine_id, public_key, enrolled, first_seen, "
                        "labels) VALUES (?, ?, 1, ?, ?) ON CONFLICT(machine_id) DO UPDATE SET "
                        "public_key = excluded.public_key, enrolled = 1, "
                        "labels = excluded.labels",
                        (machine_id, public_key, int(time.time()), pinned))

    def record(self, verdict: Verdict, *, enrolled_only: bool, rollout: Rollout | None,
               max_verdicts: int = MAX_VERDICTS) -> bool:
        """Record a checked verdict in one transaction; False for an identical resend.
        Raises Refused (and counts it) for a device, sequence, rollout or wave the store
        refuses. `rollout` is the published rollout the verdict names (None: none is)."""
        try:
            self.db.execute("BEGIN IMMEDIATE")
            new = self._record(verdict, enrolled_only=enrolled_only, rollout=rollout,
                               max_verdicts=max_verdicts)
            self.db.execute("COMMIT")
            return new
        except Refused as refused:
            self.db.execute("ROLLBACK")
            self.refuse(refused.reason)
            raise
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def _record(self, verdict: Verdict, *, enrolled_only: bool, rollout: Rollout | None,
                max_verdicts: int) -> bool:
        row = self.db.execute("SELECT public_key, last_seq, labels FROM devices WHERE "
                              "machine_id = ?", (verdict.machine_id,)).fetchone()
        if row is None and enrolled_only:
            raise Refused("unknown-device", f"{verdict.machine_id} is not enrolled")
        if row is not None and row[0] != verdict.public_key:
            raise Refused("foreign-device", f"{verdict.machine_id} has another key pinned")
        if self.db.execute("SELECT 1 FROM verdicts WHERE digest = ?",
                           (verdict.digest,)).fetchone():
            # A resend (the device never got the answer) or a replay of a recorded verdict:
            # either way nothing changes; counted apart from the refusals.
            self.db.execute("INSERT INTO refusals VALUES (?, 1) ON CONFLICT(reason) DO "
                            "UPDATE SET count = count + 1", (DUPLICATE,))
            return False
        if row is not None and verdict.seq <= row[1]:
            raise Refused("replayed", f"seq {verdict.seq} is not above {row[1]}")
        if rollout is None:
            raise Refused("unknown-rollout", f"no published rollout {verdict.rollout} of "
                                             f"{verdict.commit[:12]}")
        labels = _labels_text(verdict.label_map())
        if row is not None and row[2] is not None and row[2] != labels:
            raise Refused("foreign-labels", f"{verdict.machine_id} reports labels {labels}, "
                                            f"{row[2]} are pinned")
        check_wave(rollout, verdict)
        sent = self.db.execute("SELECT count(*) FROM verdicts WHERE machine_id = ? AND "
                               "rollout = ? AND commit_id = ?", (verdict.machine_id,
                               verdict.rollout, verdict.commit)).fetchone()[0]
        if sent >= max_verdicts:
            raise Refused("too-many", f"{verdict.machine_id} sent {sent} verdicts for rollout "
                                      f"{verdict.rollout}, the limit")
        if row is None:
            self.db.execute("INSERT INTO devices VALUES (?, ?, 0, ?, ?, ?)",
                            (verdict.machine_id, verdict.public_key, int(time.time()),
                             verdict.seq, labels))
        else:
            self.db.execute("UPDATE devices SET last_seq = ?, labels = ? WHERE machine_id = ?",
                            (verdict.seq, labels, verdict.machine_id))
        self.db.execute(
            "INSERT INTO verdicts (digest, machine_id, seq, time, received, ref, rollout, "
            "commit_id, wave, event, from_commit, from_version, version, boots, failed_check, "
            "held_reason, held_since, failed_log) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (verdict.digest, verdict.machine_id, verdict.seq, verdict.time, int(time.time()),
             verdict.ref, verdict.rollout, verdict.commit, verdict.wave, verdict.event,
             verdict.from_commit, verdict.from_version, verdict.version, verdict.boots,
             verdict.failed_check, verdict.held_reason, verdict.held_since,
             verdict.failed_log))
        return True

    def counts(self, rollout: Rollout) -> list[WaveCounts]:
        """Per wave, the devices by the furthest event each reported."""
        waves = [WaveCounts() for _ in rollout.waves]
        furthest: dict[str, tuple[int, int, str]] = {}
        for machine, wave, event, failed in self.db.execute(
                "SELECT machine_id, wave, event, failed_check FROM verdicts WHERE rollout = ? "
                "AND commit_id = ? ORDER BY seq", (rollout.id, rollout.commit)):
            rank = ORDER.index(event)
            if machine not in furthest or rank >= furthest[machine][0]:
                furthest[machine] = (rank, wave, failed)
        for rank, wave, failed in furthest.values():
            if not 0 <= wave < len(waves):
                continue
            counts = waves[wave]
            for column in REACHED[ORDER[rank]]:
                setattr(counts, column, getattr(counts, column) + 1)
            if ORDER[rank] == "rolled-back":
                key = failed or "unknown"
                counts.failed_checks[key] = counts.failed_checks.get(key, 0) + 1
        return waves

    def note(self, name: str, text: str | None, now: int) -> None:
        """Keep (or with None, drop) a note the status shows, since its first `now`."""
        if text is None:
            self.db.execute("DELETE FROM notes WHERE name = ?", (name,))
            return
        self.db.execute("INSERT INTO notes VALUES (?, ?, ?) ON CONFLICT(name) DO UPDATE SET "
                        "text = excluded.text", (name, text, now))

    def notes(self) -> dict[str, tuple[str, int]]:
        return {name: (text, since) for name, text, since in
                self.db.execute("SELECT name, text, since FROM notes")}

    def device_labels(self, machine_id: str) -> dict[str, str] | None:
        row = self.db.execute("SELECT labels FROM devices WHERE machine_id = ?",
                              (machine_id,)).fetchone()
        return None if row is None or row[0] is None else dict(json.loads(row[0]))

    def verdict_count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM verdicts").fetchone()[0])


def _labels_text(labels: dict[str, str]) -> str:
    return json.dumps(labels, sort_keys=True, separators=(",", ":"))
