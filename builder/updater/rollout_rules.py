"""What a rollout asks of each label group: a disruption budget, and update windows.

Both travel in the signed statement's rollout (builder/updater/waves.py), so a device
believes them exactly as far as it believes the rollout:

    "budget": {"group_by": "site", "max": 1, "grants": {"lab": ["<machine id>", ...]}}
    "windows": [{"labels": {"site": "lab"}, "download": null,
                 "apply": "Sat,Sun 01:00-05:00", "time_zone": "UTC"}, ...]

Budget: devices cannot see each other, so the collector decides who may update and signs
it: `grants` names, per value of the `group_by` label, the devices that hold a slot. A
device of the rollout stages only when its machine id is granted in its group; `max` is the
number of slots per group (an integer, or "N%" of the group's devices the collector knows,
rounded up, at least 1), which the collector applies when it grants (builder/rollout/
budget.py). A device without the label is in the group "" (every such device together):
it is limited like the others, never let through unlimited, since nobody knows where it is.

Windows: the first entry whose labels all match the device's replaces update.yaml's
download and/or apply window (the ones it names; a null keeps update.yaml's), read in its
`time_zone` ("" : update.yaml's time_zone, else the device's local time). The apply window
also gates the reboot into the staged release, as update.yaml's does.

Device side: Python 3.9, standard library only.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from typing import Any

from builder.core.bounded_json import Doc
from builder.updater.update_config import known_zone
from builder.updater.windows import WINDOW_ALLOWED, WINDOW_RE, ZONE_RE, Window, parse_window

LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")
GROUP_RE = re.compile(r"^(|[A-Za-z0-9][A-Za-z0-9._/-]{0,62})$")   # "": no such label
MACHINE_RE = re.compile(r"^[A-Za-z0-9]{1,64}$")
MAX_RE = re.compile(r"^([1-9][0-9]{0,5}|([1-9][0-9]?|100)%)$")
MAX_ALLOWED = "a number of devices (1 to 999999) or a share of the group ('1%' to '100%')"
MAX_GROUPS = 1000          # label values with a grant at once
MAX_GRANTS = 10_000        # granted devices in one statement, all groups together
MAX_WINDOWS = 100
KINDS = ("download", "apply")


@dataclass(frozen=True)
class Budget:
    group_by: str
    max: int | str                    # devices, or "N%" of the group
    grants: tuple[tuple[str, tuple[str, ...]], ...] = ()   # (group value, machine ids)

    def grant_map(self) -> dict[str, tuple[str, ...]]:
        return dict(self.grants)

    def limit(self, group_size: int) -> int:
        """The slots of a group of `group_size` known devices."""
        if isinstance(self.max, int):
            return self.max
        return max(1, math.ceil(int(self.max[:-1]) * group_size / 100))

    def text(self) -> str:
        return f"{self.group_by}={self.max}"

    def to_dict(self) -> dict[str, Any]:
        return {"group_by": self.group_by, "max": self.max,
                "grants": {group: list(ids) for group, ids in self.grants}}


@dataclass(frozen=True)
class GroupWindows:
    labels: tuple[tuple[str, str], ...]
    download: Window | None = None
    apply: Window | None = None
    time_zone: str = ""

    def matches(self, labels: dict[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.labels)

    def selector(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.labels)

    def now(self, device_now: dt.datetime) -> dt.datetime:
        """The time its windows are read in: its own zone, else the device's."""
        if not self.time_zone:
            return device_now
        from zoneinfo import ZoneInfo
        return device_now.astimezone(ZoneInfo(self.time_zone))

    def to_dict(self) -> dict[str, Any]:
        return {"labels": dict(self.labels), "time_zone": self.time_zone,
                **{kind: None if getattr(self, kind) is None else getattr(self, kind).text()
                   for kind in KINDS}}


def group_of(budget: Budget, labels: dict[str, str]) -> str:
    return labels.get(budget.group_by, "")


def group_text(budget: Budget, group: str) -> str:
    return f"{budget.group_by}={group}" if group else f"(no {budget.group_by} label)"


def budget_hold(budget: Budget | None, machine_id: str, labels: dict[str, str]) -> str | None:
    """Why this device may not stage now under the budget, or None: it holds a slot."""
    if budget is None:
        return None
    group = group_of(budget, labels)
    granted = budget.grant_map().get(group, ())
    if machine_id in granted:
        return None
    what = f"disruption budget of {group_text(budget, group)}"
    holders = ", ".join(granted[:3]) + (f" and {len(granted) - 3} more" if len(granted) > 3
                                        else "")
    if isinstance(budget.max, int) and len(granted) >= budget.max:
        return (f"{what} full ({len(granted)} of {budget.max} updating: {holders}): this "
                "device stages once the collector grants it a slot")
    limit = f"{budget.max}" if isinstance(budget.max, int) else f"{budget.max} of the group"
    return (f"{what}: no slot granted to this device yet ({len(granted)} updating, at most "
            f"{limit}): the collector grants one after it hears this device downloaded")


def windows_for(windows: tuple[GroupWindows, ...], labels: dict[str, str]
                ) -> GroupWindows | None:
    """The rollout's windows for this device: the first entry that selects it."""
    return next((entry for entry in windows if entry.matches(labels)), None)


def parse_budget(doc: Doc) -> Budget:
    group_by = doc.text("group_by", pattern=LABEL_RE, allowed="a label name")
    raw = doc.data.get("max")
    if isinstance(raw, bool) or not isinstance(raw, (int, str)) or not MAX_RE.match(str(raw)) \
            or (isinstance(raw, str) and not raw.endswith("%")):
        raise doc.fail("max", f"is {str(raw)[:40]!r}; allowed: {MAX_ALLOWED}")
    grants = doc.child("grants")
    assert grants is not None  # required
    if len(grants.data) > MAX_GROUPS:
        raise doc.fail("grants", f"has {len(grants.data)} groups; allowed: at most "
                       f"{MAX_GROUPS}")
    parsed: list[tuple[str, tuple[str, ...]]] = []
    total = 0
    for group in sorted(grants.data):
        if not GROUP_RE.match(group):
            raise grants.fail(group[:40], "is not a label value; allowed: letters, digits, "
                              "'.', '_', '/', '-', or \"\" for devices without the label")
        ids = grants.array(group, max_items=MAX_GRANTS)
        if not all(isinstance(i, str) and MACHINE_RE.match(i) for i in ids) or \
                len(set(ids)) != len(ids):
            raise grants.fail(group, "is not a list of distinct machine ids")
        total += len(ids)
        parsed.append((group, tuple(ids)))
    if total > MAX_GRANTS:
        raise doc.fail("grants", f"grants {total} devices; allowed: at most {MAX_GRANTS}")
    value: int | str = raw if isinstance(raw, int) else str(raw)
    return Budget(group_by, value, tuple(parsed))


def parse_windows(items: list[Any], what: str, prefix: str) -> tuple[GroupWindows, ...]:
    parsed = []
    for number, item in enumerate(items):
        doc = Doc(item, what, f"{prefix}[{number}]")
        labels = doc.mapping("labels", LABEL_RE.match, "a map of label names to values")
        if not labels:
            raise doc.fail("labels", "is empty; allowed: the labels of the group")
        found: dict[str, Window | None] = {}
        for kind in KINDS:
            text = doc.text(kind, required=False, pattern=WINDOW_RE, allowed=WINDOW_ALLOWED)
            found[kind] = parse_window(text) if text else None
            window = found[kind]
            if window is not None and window.start == window.end:
                raise doc.fail(kind, f"is {text!r}, empty; allowed: {WINDOW_ALLOWED}")
        if found["download"] is None and found["apply"] is None:
            raise doc.fail("apply", "and download are both missing; allowed: at least one")
        zone = doc.text("time_zone", required=False, default="", max_length=64)
        if zone and not (ZONE_RE.match(zone) and known_zone(zone)):
            raise doc.fail("time_zone", f"is {zone!r}; allowed: a tz database name or \"\"")
        parsed.append(GroupWindows(tuple(sorted(labels.items())), found["download"],
                                   found["apply"], zone))
    return tuple(parsed)


def parse_rules(doc: Doc) -> tuple[Budget | None, tuple[GroupWindows, ...]]:
    """The budget and windows of a rollout document (both optional); BadDocument names the
    field."""
    budget_doc = doc.child("budget", required=False)
    budget = None if budget_doc is None else parse_budget(budget_doc)
    items = doc.array("windows", required=False, max_items=MAX_WINDOWS)
    return budget, parse_windows(items, doc.what, doc.name("windows"))

