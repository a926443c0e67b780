"""The collector's side of a rollout's disruption budget (builder/updater/rollout_rules.py):
who holds a slot, signed into the statement, and why a group waits.

Devices cannot see each other, so the collector decides. After each verdict it records
(and at `rollout advance` and `resume`), `regrant` frees the slots of granted devices that
reported green or rolled-back, gives free slots to waiting devices (their furthest verdict
is `downloaded`, in an open wave; the one that downloaded first goes first) and re-signs
the statement, under the statements lock, only when the grants changed. A halted rollout
grants nothing new. The grant times are kept in the store, to tell a slot holder that went
silent from one granted a moment ago.

A budget never stalls silently: `budget_status` names, per group, what keeps waiting
devices waiting when slots are free (no release key at the collector, or no collector
running) or when a slot holder has sent nothing for `holder_silent_after` seconds.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

from builder.core.errors import BuildError
from builder.publish.rollout_statement import statements_lock
from builder.rollout.store import ORDER, Store
from builder.updater.rollout_rules import MAX_GRANTS, Budget, group_of, group_text
from builder.updater.waves import Rollout

FINAL = ("green", "rolled-back")
HOLDER_SILENT_AFTER = 6 * 3600   # seconds a slot holder may stay silent while others wait
UNSIGNED = "budget-unsigned"     # the store's note: grants were due and nobody could sign


@dataclass(frozen=True)
class Member:
    """A device that reported on the rollout, as the budget sees it."""

    machine_id: str
    group: str
    wave: int
    furthest: str          # its furthest event
    downloaded_at: int     # when the collector received its first `downloaded` (0: none)
    last: int              # when the collector received its newest verdict
    held_reason: str       # of its newest verdict
    held_since: int


def members(store: Store, rollout: Rollout, budget: Budget | None) -> list[Member]:
    found: dict[str, dict[str, Any]] = {}
    for machine, wave, event, received, reason, since, labels in store.db.execute(
            "SELECT v.machine_id, v.wave, v.event, v.received, v.held_reason, v.held_since, "
            "d.labels FROM verdicts AS v JOIN devices AS d USING (machine_id) WHERE "
            "v.rollout = ? AND v.commit_id = ? ORDER BY v.seq", (rollout.id, rollout.commit)):
        row = found.setdefault(machine, {"rank": -1, "downloaded": 0, "last": 0,
                                         "labels": json.loads(labels) if labels else {}})
        if ORDER.index(event) >= row["rank"]:
            row["rank"], row["wave"] = ORDER.index(event), wave
        if event == "downloaded" and not row["downloaded"]:
            row["downloaded"] = received
        row["last"], row["reason"], row["since"] = max(row["last"], received), reason, since
    return [Member(machine, group_of(budget, row["labels"]) if budget else "", row["wave"],
                   ORDER[row["rank"]], row["downloaded"], row["last"], row["reason"],
                   row["since"]) for machine, row in sorted(found.items())]


def group_sizes(store: Store, budget: Budget) -> Counter[str]:
    """The devices of each group the collector knows (enrolled with labels, or reporting)."""
    return Counter(group_of(budget, json.loads(labels)) for (labels,) in store.db.execute(
        "SELECT labels FROM devices WHERE labels IS NOT NULL"))


def waiting(rollout: Rollout, found: list[Member]) -> list[Member]:
    """Devices that downloaded and wait for a slot, first come first."""
    granted = {i for _, ids in rollout.budget.grants for i in ids} if rollout.budget else set()
    ready = [m for m in found if m.furthest == "downloaded" and m.machine_id not in granted
             and 0 <= m.wave < len(rollout.waves)
             and (rollout.waves[m.wave].opened is not None or rollout.state == "complete")]
    return sorted(ready, key=lambda m: (m.downloaded_at, m.machine_id))


def plan_grants(rollout: Rollout, found: list[Member], sizes: Counter[str]
                ) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The grants the budget should carry now."""
    budget = rollout.budget
    assert budget is not None
    done = {m.machine_id for m in found if m.furthest in FINAL}
    grants = {group: [i for i in ids if i not in done] for group, ids in budget.grants}
    if rollout.state != "halted":
        total = sum(len(ids) for ids in grants.values())
        for member in waiting(rollout, found):
            slots = grants.setdefault(member.group, [])
            if len(slots) < budget.limit(sizes[member.group]) and total < MAX_GRANTS:
                slots.append(member.machine_id)
                total += 1
    return tuple((group, tuple(sorted(ids))) for group, ids in sorted(grants.items()) if ids)


def with_grants(rollout: Rollout, store: Store) -> Rollout:
    """The rollout with its budget's grants as they should be now (as it is without one)."""
    if rollout.budget is None:
        return rollout
    grants = plan_grants(rollout, members(store, rollout, rollout.budget),
                         group_sizes(store, rollout.budget))
    return replace(rollout, budget=replace(rollout.budget, grants=grants))


def record_grants(store: Store, rollout: Rollout, now: int) -> None:
    """Keep when each slot was granted (first time only); the note of a stall goes."""
    ids = [i for _, group in rollout.budget.grants for i in group] if rollout.budget else []
    store.db.executemany("INSERT OR IGNORE INTO grants VALUES (?, ?, ?, ?)",
                         [(rollout.id, rollout.commit, i, now) for i in ids])
    store.note(f"{UNSIGNED}:{rollout.id}", None, now)


def regrant(site: Any, store: Store, signer: Any, *, ref: str, rollout_id: str,
            now: int | None = None) -> Rollout | None:
    """After a verdict of rollout `rollout_id` on `ref`: re-sign with the grants as they
    should be, when they changed; the changed rollout, or None. Without a signer the
    change cannot be signed: the store notes it, for the status to show."""
    now = int(time.time()) if now is None else now
    with statements_lock(site.root):
        try:
            ref, stamp, rollout = site.statement(ref)
        except BuildError:
            return None
        if rollout.id != rollout_id or rollout.budget is None:
            return None
        changed = with_grants(rollout, store)
        if changed == rollout:
            return None
        if signer is None:
            store.note(f"{UNSIGNED}:{rollout.id}", "no release key at the collector (`rollout "
                       "serve` without --gpg-homedir/--gpg-key): it cannot sign the grants", now)
            return None
        signer.sign(site, ref, stamp, changed)
        record_grants(store, changed, now)
    return changed


def budget_status(rollout: Rollout, store: Store, now: int,
                  holder_silent_after: int = HOLDER_SILENT_AFTER) -> dict[str, Any] | None:
    budget = rollout.budget
    if budget is None:
        return None
    found = members(store, rollout, budget)
    sizes = group_sizes(store, budget)
    done = {m.machine_id for m in found if m.furthest in FINAL}
    granted = budget.grant_map()
    queue = waiting(rollout, found)
    groups: dict[str, Any] = {}
    for group in sorted(set(sizes) | set(granted) | {m.group for m in queue}):
        updating = [i for i in granted.get(group, ()) if i not in done]
        waits = [m.machine_id for m in queue if m.group == group]
        limit = budget.limit(sizes[group])
        info = {"limit": limit, "devices": sizes[group], "updating": updating,
                "waiting": waits}
        groups[group] = {**info, "stalled": _stall(rollout, store, found, info, now=now,
                                                   silent_after=holder_silent_after)}
    return {"group_by": budget.group_by, "max": budget.max, "groups": groups}


def _stall(rollout: Rollout, store: Store, found: list[Member], info: dict[str, Any], *,
           now: int, silent_after: int) -> str:
    """Why the group's waiting devices are not moving, or "" (none wait, or slots move)."""
    updating, waits, limit = info["updating"], info["waiting"], info["limit"]
    if not waits or rollout.state == "halted":
        return ""
    if len(updating) < limit:
        note = store.notes().get(f"{UNSIGNED}:{rollout.id}")
        why = f"{note[0]}, since {_date(note[1])}" if note else \
            "not granted yet: is `rollout serve` running with the release key? (`rollout " \
            "advance` and `resume` grant too)"
        return f"{len(waits)} waiting with {limit - len(updating)} free slots: {why}"
    last = {m.machine_id: m.last for m in found}
    granted_at = dict(store.db.execute(
        "SELECT machine_id, granted FROM grants WHERE rollout = ? AND commit_id = ?",
        (rollout.id, rollout.commit)).fetchall())
    silent = [(max(last.get(i, 0), granted_at.get(i, 0)), i) for i in updating]
    lines = [f"{i} holds a slot and sent no verdict since {_date(since)}"
             for since, i in sorted(silent) if now - since > silent_after]
    if not lines:
        return ""
    return "; ".join(lines) + f" ({len(waits)} waiting behind; is it off or cut off?)"


def held_devices(rollout: Rollout, store: Store) -> list[dict[str, Any]]:
    """Devices whose newest verdict says a run of theirs is held, and that did not stage."""
    return [{"machine_id": m.machine_id, "wave": m.wave + 1, "reason": m.held_reason,
             "since": m.held_since}
            for m in members(store, rollout, rollout.budget)
            if m.held_reason and m.furthest in ("offered", "downloaded")]


def budget_text(report: dict[str, Any] | None) -> list[str]:
    if report is None:
        return []
    budget = Budget(report["group_by"], report["max"])
    lines = [f"  disruption budget {budget.text()} per group:"]
    for group, info in report["groups"].items():
        lines.append(f"    {group_text(budget, group)}: {len(info['updating'])} of "
                     f"{info['limit']} updating ({', '.join(info['updating']) or 'none'}), "
                     f"{len(info['waiting'])} waiting")
        if info["stalled"]:
            lines.append(f"      STALLED: {info['stalled']}")
    return lines


def _date(seconds: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(seconds))
