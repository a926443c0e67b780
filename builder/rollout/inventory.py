"""The fleet's inventory, as the collector knows it: every enrolled or reporting device with
its labels, when it last reported, what it last reported and the version it booted then.

A device reports only while a rollout offers it something, so "last contact" is the last
verdict the collector received (`never` for a device enrolled ahead of any). The booted
version is read from that verdict: a green one booted the new version; a device that
greenboot rolled back, or that has offered, downloaded or staged the new one, still runs
the version it came from. A rolled-back device is never shown on the version it tried
(flightctl's users were shown such devices as up to date: its PRs #2470, #3477). A device
whose newest verdict says it is held (a window, or the rollout's disruption budget) shows
the reason and since when.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from builder.rollout.store import Store

SILENT_AFTER = 24 * 3600   # seconds without a verdict before a device is flagged silent


@dataclass(frozen=True)
class Device:
    machine_id: str
    labels: dict[str, str]
    enrolled: bool              # pinned by `rollout enroll`, not only by its first verdict
    first_seen: int
    last_contact: int | None    # when the collector received its newest verdict
    last_event: str | None      # offered, downloaded, staged, green, rolled-back
    rollout: str | None
    wave: int | None
    booted_version: str | None  # what it ran when it sent that verdict
    failed_check: str           # the health check that failed, for a rolled-back device
    silent: bool                # no verdict for longer than the threshold (or never)
    held_reason: str = ""       # its newest verdict says a run of it is held, and why
    held_since: int | None = None
    failed_log: str = ""        # that check's last lines, as the device's greenboot saw them


def inventory(store: Store, now: int, silent_after: int = SILENT_AFTER) -> list[Device]:
    last = {row[0]: row[1:] for row in store.db.execute(
        "SELECT machine_id, event, rollout, wave, version, from_version, failed_check, "
        "held_reason, held_since, failed_log, "
        "(SELECT max(received) FROM verdicts AS r WHERE r.machine_id = v.machine_id) "
        "FROM verdicts AS v WHERE seq = (SELECT max(seq) FROM verdicts AS s "
        "WHERE s.machine_id = v.machine_id)")}
    devices = []
    for machine, labels, enrolled, first_seen in store.db.execute(
            "SELECT machine_id, labels, enrolled, first_seen FROM devices ORDER BY machine_id"):
        found = last.get(machine)
        if found is None:
            devices.append(Device(machine, _labels(labels), bool(enrolled), first_seen, None,
                                  None, None, None, None, "", silent=True))
            continue
        event, rollout, wave, version, from_version, failed, held, since, log, received = found
        booted = version if event == "green" else from_version
        devices.append(Device(machine, _labels(labels), bool(enrolled), first_seen, received,
                              event, rollout, wave, booted or None,
                              failed if event == "rolled-back" else "",
                              silent=now - received > silent_after, held_reason=held,
                              held_since=since if held else None,
                              failed_log=log if event == "rolled-back" else ""))
    return devices


def _labels(text: str | None) -> dict[str, str]:
    return dict(json.loads(text)) if text else {}


def inventory_json(devices: list[Device], silent_after: int) -> str:
    document: dict[str, Any] = {
        "silent_after_seconds": silent_after,
        "devices": [asdict(device) for device in devices],
        "silent": sum(device.silent for device in devices)}
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def inventory_text(devices: list[Device], now: int) -> str:
    rows = [("machine id", "labels", "booted", "last verdict", "last contact", "")]
    for device in devices:
        labels = ",".join(f"{k}={v}" for k, v in sorted(device.labels.items())) or "-"
        verdict = "-" if device.last_event is None else \
            f"{device.last_event} (wave {(device.wave or 0) + 1} of {device.rollout})" + \
            (f": {device.failed_check}" if device.failed_check else "") + \
            (f", held: {device.held_reason}" if device.held_reason else "")
        contact = "never" if device.last_contact is None else \
            f"{_ago(now - device.last_contact)} ago"
        rows.append((device.machine_id, labels, device.booted_version or "?", verdict,
                     contact, "SILENT" if device.silent else ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    silent = sum(device.silent for device in devices)
    lines.append(f"{len(devices)} devices, {silent} silent "
                 f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(now))})")
    return "\n".join(lines) + "\n"


def _ago(seconds: int) -> str:
    seconds = max(seconds, 0)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"
