"""What the console shows besides the live status: the admin's actions (advance, halt,
resume, from the console or the command line's collector), the newest verdicts as a
timeline, and every rollout the collector has heard of, past ones included.

The actions live in the collector's database beside the verdicts (table `actions`), written
in the same process that re-signed the statement, after the signature: an action the table
shows happened; one refused is recorded as refused, with the reason the admin was shown.
"""

from __future__ import annotations

import sqlite3
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS actions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, time INTEGER NOT NULL, ref TEXT NOT NULL,
    rollout TEXT NOT NULL, action TEXT NOT NULL, outcome TEXT NOT NULL,
    detail TEXT NOT NULL, source TEXT NOT NULL);
"""
MAX_TIMELINE = 500


def record_action(db: sqlite3.Connection, *, when: int, ref: str, rollout: str, action: str,
                  outcome: str, detail: str, source: str) -> None:
    db.execute("INSERT INTO actions (time, ref, rollout, action, outcome, detail, source) "
               "VALUES (?, ?, ?, ?, ?, ?, ?)",
               (when, ref, rollout, action, outcome, detail[:500], source))


def actions(db: sqlite3.Connection, limit: int = MAX_TIMELINE) -> list[dict[str, Any]]:
    rows = db.execute("SELECT seq, time, ref, rollout, action, outcome, detail, source "
                      "FROM actions ORDER BY seq DESC LIMIT ?", (limit,))
    names = ("seq", "time", "ref", "rollout", "action", "outcome", "detail", "source")
    return [dict(zip(names, row, strict=True)) for row in rows]


def timeline(db: sqlite3.Connection, limit: int = 100) -> list[dict[str, Any]]:
    """The newest verdicts first: who reported what, when the collector received it."""
    rows = db.execute("SELECT received, time, machine_id, ref, rollout, wave, event, version, "
                      "from_version, boots, failed_check FROM verdicts "
                      "ORDER BY received DESC, rowid DESC LIMIT ?",
                      (max(1, min(limit, MAX_TIMELINE)),))
    names = ("received", "time", "machine_id", "ref", "rollout", "wave", "event", "version",
             "from_version", "boots", "failed_check")
    return [dict(zip(names, row, strict=True)) for row in rows]


def rollouts(db: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every rollout with a verdict: devices by their furthest event, newest first."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for ref, rollout, commit, first, last, devices in db.execute(
            "SELECT ref, rollout, commit_id, min(received), max(received), "
            "count(DISTINCT machine_id) FROM verdicts GROUP BY ref, rollout, commit_id"):
        found[(rollout, commit)] = {"ref": ref, "rollout": rollout, "commit": commit,
                                    "first_verdict": first, "last_verdict": last,
                                    "devices": devices, "green": 0, "rolled_back": 0}
    for rollout, commit, event, count in db.execute(
            "SELECT rollout, commit_id, event, count(DISTINCT machine_id) FROM verdicts "
            "WHERE event IN ('green', 'rolled-back') GROUP BY rollout, commit_id, event"):
        found[(rollout, commit)]["green" if event == "green" else "rolled_back"] = count
    return sorted(found.values(), key=lambda entry: entry["last_verdict"], reverse=True)
