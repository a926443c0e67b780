"""A fleet rollout: which devices may stage the newest commit now.

The rollout travels in the signed statement beside the index (updates/REF/timestamp.json,
builder/updater/freshness.py), so a device believes it exactly as far as it believes the
index, and a replayed statement that showed a wave open (or the rollout not halted) is
refused as any replayed statement is:

    "rollout": {"id": "...", "commit": "<the head it rolls out>", "state": "active",
                "reason": "", "waves": [{"name": "lab", "labels": {"site": "lab"},
                "percent": null, "soak_seconds": 3600, "success_threshold": 95,
                "halt_threshold": 20, "opened": 1767225600}, ...],
                "budget": {...}, "windows": [...]}     # optional: rollout_rules.py

A wave selects devices by labels (every label of the wave matches the device's `labels:`
in /etc/microshift/update.yaml) or by a cumulative share of the fleet: a device's place is
sha256(rollout id, machine id) read as a number in [0, 100), and it belongs to the first
wave whose share exceeds its place, as flightctl's batch sequence counts its percentages
(a wave of 30% holds every device of the waves before it that fell under 30%). The last
wave is always everyone (`percent: 100`), so each device has exactly one wave. The same
rollout id gives each device the same place for every release: an admin who keeps the id
keeps the same canaries.

Device side: Python 3.9, standard library only.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from builder.core.bounded_json import BadDocument, Doc
from builder.updater.index import CHECKSUM, UpdateRefused
from builder.updater.rollout_rules import LABEL_RE, Budget, GroupWindows, parse_rules

STATES = ("active", "halted", "complete")
STATE_RE = re.compile(f"^({'|'.join(STATES)})$")
MAX_WAVES = 100
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
PLACE_SCALE = 2 ** 64


@dataclass(frozen=True)
class Wave:
    name: str
    percent: float | None          # a cumulative share of the fleet, or None
    labels: tuple[tuple[str, str], ...] = ()   # or a label selector
    soak_seconds: int = 0
    success_threshold: float = 100.0  # % of the wave's reporting devices green to advance
    halt_threshold: float = 0.0       # % of the wave's devices that tried and rolled back
    opened: int | None = None      # when the wave opened (seconds), None: not yet

    def selector(self) -> str:
        if self.labels:
            return ",".join(f"{k}={v}" for k, v in self.labels)
        return f"{self.percent:g}%"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "percent": self.percent,
                "labels": dict(self.labels), "soak_seconds": self.soak_seconds,
                "success_threshold": self.success_threshold,
                "halt_threshold": self.halt_threshold, "opened": self.opened}


@dataclass(frozen=True)
class Rollout:
    id: str
    commit: str
    state: str = "active"
    reason: str = ""
    waves: tuple[Wave, ...] = field(default_factory=tuple)
    budget: Budget | None = None          # builder/updater/rollout_rules.py
    windows: tuple[GroupWindows, ...] = ()

    @property
    def open_count(self) -> int:
        return sum(1 for wave in self.waves if wave.opened is not None)

    def to_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {"id": self.id, "commit": self.commit, "state": self.state,
                                    "reason": self.reason,
                                    "waves": [w.to_dict() for w in self.waves]}
        # Written only when set: a statement without them reads as it did before them.
        if self.budget is not None:
            document["budget"] = self.budget.to_dict()
        if self.windows:
            document["windows"] = [entry.to_dict() for entry in self.windows]
        return document


def place(rollout_id: str, machine_id: str) -> float:
    """The device's place in [0, 100) for this rollout id: uniform, and the same for every
    release rolled out under the same id."""
    digest = hashlib.sha256(f"{rollout_id}\0{machine_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") * 100.0 / PLACE_SCALE


def wave_of(rollout: Rollout, machine_id: str, labels: dict[str, str]) -> int:
    """The index of the device's wave: the first that selects it."""
    where = place(rollout.id, machine_id)
    for number, wave in enumerate(rollout.waves):
        if wave.labels:
            if all(labels.get(key) == value for key, value in wave.labels):
                return number
        elif wave.percent is not None and where < wave.percent:
            return number
    return len(rollout.waves) - 1  # the last wave is 100%: not reached but for rounding


def hold_reason(rollout: Rollout, wave: int) -> str | None:
    """Why a device of wave `wave` must not stage the rollout's commit now, or None."""
    what = f"rollout {rollout.id} of {rollout.commit[:12]}"
    if rollout.state == "halted":
        return (f"{what} is halted ({rollout.reason or 'by the admin'}): staying on the "
                "booted commit")
    if rollout.state == "complete" or rollout.waves[wave].opened is not None:
        return None
    chosen = rollout.waves[wave]
    return (f"{what}: this device is in wave {wave + 1} ({chosen.name}: "
            f"{chosen.selector()}), not open yet ({rollout.open_count} of "
            f"{len(rollout.waves)} open)")


def parse_rollout(data: Any, what: str) -> Rollout:
    """The `rollout` of a statement, checked field by field; UpdateRefused naming the field."""
    try:
        doc = Doc(data, what, "rollout")
        rollout_id = doc.text("id", pattern=ID_RE, allowed="a rollout id (letters, digits, "
                              "'.', '_', '-', at most 64)")
        commit = doc.text("commit", pattern=CHECKSUM, allowed="a commit checksum")
        state = doc.text("state", pattern=STATE_RE, allowed=", ".join(STATES))
        reason = doc.text("reason", required=False, default="", max_length=1024)
        waves = doc.array("waves", max_items=MAX_WAVES)
        if not waves:
            raise doc.fail("waves", "is empty; allowed: at least one wave")
        parsed = tuple(parse_wave(Doc(wave, what, f"rollout.waves[{n}]"))
                       for n, wave in enumerate(waves))
        budget, windows = parse_rules(doc)
    except BadDocument as exc:
        raise UpdateRefused(str(exc)) from None
    if parsed[-1].percent != 100 or parsed[-1].labels:
        raise UpdateRefused(f"{what}: the last rollout wave is not 100%")
    return Rollout(rollout_id, commit, state, reason, parsed, budget, windows)


def parse_wave(doc: Doc) -> Wave:
    name = doc.text("name", max_length=256)
    labels = doc.mapping("labels", LABEL_RE.match, "a map of label names to values "
                         "(letters, digits, '.', '_', '/', '-')")
    percent = doc.number("percent", 0, 100, required=False)
    if (percent is None) == (not labels):
        raise doc.fail("percent", "and labels: one of them is needed, not both")
    if percent is not None and percent <= 0:
        raise doc.fail("percent", f"is {percent:g}; allowed: a number in (0, 100]")
    soak = doc.integer("soak_seconds", 0, 2 ** 40 - 1, required=False, default=0)
    opened = doc.integer("opened", 0, 2 ** 40 - 1, required=False)
    success = doc.number("success_threshold", 0, 100, required=False, default=100.0)
    halt = doc.number("halt_threshold", 0, 100, required=False, default=0.0)
    return Wave(name, percent, tuple(sorted(labels.items())), soak, success, halt, opened)
