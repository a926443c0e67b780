"""A rollout's disruption budget at the collector (builder/rollout/budget.py): it grants at
most the budget's slots per label group to devices that downloaded, first come first, signs
them into the statement and frees a slot when its holder reports green; a budget that
cannot move says why in `rollout status` (text and --json): no release key at the
collector, or a slot holder gone silent. A device's held run shows in the status and in
`rollout devices`.

Integration tier: devices sign their verdicts with the updater's own code and real openssl,
the statement is signed with real GPG, the store is a real SQLite database."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from builder.rollout.admin import advance, status
from builder.rollout.collector import Collector
from builder.rollout.store import Store
from builder.updater.rollout_rules import Budget, budget_hold
from tests.rollout.support import (
    REF,
    DeviceIdentity,
    devices,
    make_site,
    rollout_of,
    signer,
    statement_verifies,
)
from tests.support.cli import run_cli
from tests.support.keys import ReleaseKey

pytestmark = pytest.mark.integration
LAB, FIELD = {"site": "lab"}, {"site": "field"}


def _collector(tmp_path: Path, release_key: ReleaseKey, budget: str | int = 1, *,
               with_key: bool = True) -> Collector:
    key, _ = release_key
    site = make_site(tmp_path / "site", key, "100%", budget=Budget("site", budget))
    return Collector(site, Store(tmp_path / "rollout.db"), signer(key) if with_key else None,
                     False, lambda line: None)


def _send(collector: Collector, device: DeviceIdentity, event: str,
          labels: dict[str, str], **fields: object) -> None:
    code, answer = collector.take(device.verdict(event, wave=0, labels=labels, **fields))
    assert code == 201, answer


def _grants(collector: Collector) -> dict[str, tuple[str, ...]]:
    budget = rollout_of(collector.site).budget
    assert budget is not None
    return budget.grant_map()


def test_one_slot_per_site_is_granted_signed_and_freed_at_green(
        tmp_path: Path, release_key: ReleaseKey) -> None:
    collector = _collector(tmp_path, release_key)
    first, second, field = devices(tmp_path, 3)
    for device, labels in ((first, LAB), (second, LAB), (field, FIELD)):
        _send(collector, device, "offered", labels)
        _send(collector, device, "downloaded", labels)
    assert _grants(collector) == {"lab": (first.machine_id,), "field": (field.machine_id,)}
    assert statement_verifies(collector.site, release_key[1])
    budget = rollout_of(collector.site).budget
    # What the second lab device reads in the statement: the site's one slot is taken.
    hold = budget_hold(budget, second.machine_id, LAB)
    assert hold is not None and hold.startswith(
        f"disruption budget of site=lab full (1 of 1 updating: {first.machine_id})")
    assert budget_hold(budget, first.machine_id, LAB) is None
    _send(collector, first, "staged", LAB)
    assert _grants(collector)["lab"] == (first.machine_id,)
    _send(collector, first, "green", LAB)
    assert _grants(collector)["lab"] == (second.machine_id,)
    report = status(collector.site, collector.store, REF, int(time.time()))
    lab = report["budget"]["groups"]["lab"]
    assert (lab["limit"], lab["updating"], lab["waiting"], lab["stalled"]) == \
        (1, [second.machine_id], [], "")


def test_a_share_is_of_the_groups_known_devices_rounded_up(
        tmp_path: Path, release_key: ReleaseKey) -> None:
    """25% of 5 lab devices is 1.25: 2 slots; devices without the label are a group of
    their own, never unlimited."""
    collector = _collector(tmp_path, release_key, "25%")
    lab = devices(tmp_path, 5)
    bare = [DeviceIdentity(f"{n:032x}", tmp_path / f"bare-{n}") for n in (10, 11)]
    for device in lab:
        _send(collector, device, "downloaded", LAB)
    for device in bare:
        _send(collector, device, "downloaded", {})
    grants = _grants(collector)
    assert grants["lab"] == tuple(sorted(d.machine_id for d in lab[:2]))
    assert len(grants[""]) == 1
    hold = budget_hold(rollout_of(collector.site).budget, bare[1].machine_id, {})
    assert hold is not None and "disruption budget of (no site label)" in hold


def test_a_budget_the_collector_cannot_sign_says_so_in_the_status(
        tmp_path: Path, release_key: ReleaseKey, capsys: pytest.CaptureFixture[str]) -> None:
    collector = _collector(tmp_path, release_key, with_key=False)
    waiting = devices(tmp_path, 2)
    for device in waiting:
        _send(collector, device, "downloaded", LAB)
    assert _grants(collector) == {}
    collector.store.close()
    site, db = collector.site.root, tmp_path / "rollout.db"
    assert run_cli("rollout", "status", "--site", site, "--db", db) == 0
    text = capsys.readouterr().out
    assert "site=lab: 0 of 1 updating (none), 2 waiting" in text
    assert "STALLED: 2 waiting with 1 free slots: no release key at the collector" in text
    assert run_cli("rollout", "status", "--site", site, "--db", db, "--json") == 0
    lab = json.loads(capsys.readouterr().out)["budget"]["groups"]["lab"]
    assert lab["waiting"] == [d.machine_id for d in waiting]
    assert lab["stalled"].startswith("2 waiting with 1 free slots: no release key")


def test_a_silent_slot_holder_is_named_while_others_wait(
        tmp_path: Path, release_key: ReleaseKey, capsys: pytest.CaptureFixture[str]) -> None:
    collector = _collector(tmp_path, release_key)
    holder, behind = devices(tmp_path, 2)
    _send(collector, holder, "downloaded", LAB)
    _send(collector, behind, "downloaded", LAB,
          held={"reason": "disruption budget of site=lab full", "since": 1_700_000_000})
    now = int(time.time())
    soon = status(collector.site, collector.store, REF, now)
    assert soon["budget"]["groups"]["lab"]["stalled"] == ""
    later = status(collector.site, collector.store, REF, now + 7 * 3600)
    stalled = later["budget"]["groups"]["lab"]["stalled"]
    assert stalled.startswith(f"{holder.machine_id} holds a slot and sent no verdict since ")
    assert "(1 waiting behind" in stalled
    # The device that waits says so itself, in the status and the inventory.
    assert later["held"] == [{"machine_id": behind.machine_id, "wave": 1,
                              "since": 1_700_000_000,
                              "reason": "disruption budget of site=lab full"}]
    collector.store.close()
    time.sleep(1.1)   # the CLI reads the real clock: silent for over a second
    assert run_cli("rollout", "status", "--site", collector.site.root, "--db",
                   tmp_path / "rollout.db", "--slot-silent-after", "0.0001") == 0
    text = capsys.readouterr().out
    assert f"STALLED: {holder.machine_id} holds a slot" in text
    assert f"held {behind.machine_id} (wave 1): disruption budget of site=lab full" in text
    assert run_cli("rollout", "devices", "--db", tmp_path / "rollout.db", "--json") == 0
    found = {d["machine_id"]: d for d in json.loads(capsys.readouterr().out)["devices"]}
    assert found[behind.machine_id]["held_reason"] == "disruption budget of site=lab full"
    assert found[behind.machine_id]["held_since"] == 1_700_000_000
    assert found[holder.machine_id]["held_reason"] == ""


@pytest.mark.parametrize("held", [
    {"reason": "", "since": 1}, {"reason": "x" * 513, "since": 1}, {"reason": "x"},
    {"reason": "x", "since": -1}, {"reason": "x", "since": True}, "held",
    {"reason": "x", "since": 1, "more": 1}])
def test_a_malformed_hold_is_refused(tmp_path: Path, release_key: ReleaseKey,
                                     held: object) -> None:
    collector = _collector(tmp_path, release_key)
    device = devices(tmp_path, 1)[0]
    code, answer = collector.take(device.verdict("downloaded", labels=LAB, held=held))
    assert (code, answer["refused"]) == (400, "malformed")
    assert answer["detail"].startswith("held is not {")


def test_advance_grants_the_slots_a_keyless_collector_could_not(
        tmp_path: Path, release_key: ReleaseKey) -> None:
    collector = _collector(tmp_path, release_key, with_key=False)
    first, second = devices(tmp_path, 2)
    _send(collector, first, "downloaded", LAB)
    _send(collector, second, "downloaded", LAB)
    now = int(time.time())
    assert "no release key" in \
        status(collector.site, collector.store, REF, now)["budget"]["groups"]["lab"]["stalled"]
    advanced = advance(collector.site, collector.store, signer(release_key[0]), REF, now,
                       force=True)
    assert advanced.state == "complete" and _grants(collector) == {"lab": (first.machine_id,)}
    lab = status(collector.site, collector.store, REF, now)["budget"]["groups"]["lab"]
    assert (lab["updating"], lab["waiting"], lab["stalled"]) == \
        ([first.machine_id], [second.machine_id], "")
    assert statement_verifies(collector.site, release_key[1])
