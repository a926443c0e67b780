"""A rollout's disruption budget and group windows on a fleet of simulated devices that
really download, stage, boot and report (tests/rollout/fleet.py) through the real
collector process: with a budget of one device per site, never two devices of a site are
between staged and green at once, the others say they wait for the budget and stage once
the holder reported green; a device outside its group's apply window (the rollout's, which
comes before update.yaml's) downloads, does not stage until the window opens, and its
verdict says it was held. The windows are placed around the current UTC time.

Integration tier: real ostree, GPG, openssl, greenboot's scripts, the collector process."""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from builder.core.runner import Runner
from builder.core.signing import stop_agent
from builder.device.commits import SAMPLE_REF, UpdatePair
from builder.device.health_server import Health
from builder.publish.rollout_statement import (
    RolloutPlan,
    parse_budget_option,
    parse_waves,
    parse_window_option,
    statements_lock,
)
from builder.rollout.admin import Signer, Site, start, status
from builder.rollout.store import Store
from tests.rollout import fleet
from tests.rollout.fleet import (
    T0,
    FleetDevice,
    boot,
    collector,
    make_fleet,
    published_site,
    release_key,
    status_text,
    update,
)
from tests.support import requires
from tests.support.windows import CLOSED, OPEN

pytestmark = [pytest.mark.integration, fleet.tier,
              requires.root_only("booting the simulated devices makes network namespaces"),
              pytest.mark.usefixtures("deletable_sysroots")]




def _start(pair: UpdatePair, repo: Path, plan: RolloutPlan) -> None:
    key = release_key(pair)
    try:
        start(Site(repo.parent), Signer(Runner(), key), SAMPLE_REF, plan, T0)
    finally:
        stop_agent(Runner(), key.homedir)


def _status(repo: Path, db: Path) -> dict[str, Any]:
    store = Store(db)
    try:
        return status(Site(repo.parent), store, None, int(dt.datetime.now().timestamp()))
    finally:
        store.close()


def test_one_device_per_site_updates_at_a_time_and_the_rest_follow_after_green(
        pair: UpdatePair, tmp_path: Path) -> None:
    repo = published_site(pair, tmp_path)
    fleet = make_fleet(pair, tmp_path, 4)                 # 2 at site=lab, 2 at site=field
    _start(pair, repo, RolloutPlan(parse_waves("100%"), "fleet-budget",
                                   parse_budget_option("site=1")))
    db = tmp_path / "rollout.db"
    updating: set[str] = set()       # staged, and green not reported yet

    def run(member: FleetDevice) -> str:
        report = update(member, repo, url)
        if report.state == "staged":
            updating.add(member.machine_id)
        elif member.device.deployments()[0].checksum == pair.v2:
            updating.discard(member.machine_id)                  # this run reported green
        per_site = Counter(m.labels["site"] for m in fleet if m.machine_id in updating)
        assert max(per_site.values(), default=0) <= 1, per_site
        groups = _status(repo, db)["budget"]["groups"]
        assert all(len(g["updating"]) <= 1 for g in groups.values()), groups
        return report.state

    with collector(repo, db, pair) as url:
        # Everyone downloads; nobody holds a slot before the collector heard of it.
        for member in fleet:
            assert run(member) == "held", status_text(member)
            assert "held: disruption budget of site=" in status_text(member)
            assert member.device.repo.has_commit(pair.v2)
        first = [m for m in fleet if run(m) == "staged"]
        assert sorted(m.labels["site"] for m in first) == ["field", "lab"]
        rest = [m for m in fleet if m not in first]
        for member in rest:
            assert re.search(r"held: disruption budget of site=\w+ full \(1 of 1 updating: "
                             r"[0-9a-f]{32}\)", status_text(member)), status_text(member)
        # Waiting longer costs the collector no verdicts: the hold was said once.
        before = _verdicts(db)
        for member in rest:
            assert run(member) == "held"
        assert _verdicts(db) == before
        for member in first:
            boot(member, pair, Health())
            run(member)                                    # reports green: frees the slot
        for member in rest:
            assert run(member) == "staged", status_text(member)
        for member in rest:
            boot(member, pair, Health())
            run(member)
    report = _status(repo, db)
    assert report["waves"][0]["green"] == len(fleet) and updating == set()
    assert all(m.device.deployments()[0].checksum == pair.v2 for m in fleet)
    groups = report["budget"]["groups"]
    assert {g: (i["updating"], i["waiting"], i["stalled"]) for g, i in groups.items()} == \
        {"field": ([], [], ""), "lab": ([], [], "")}


def test_outside_its_groups_apply_window_a_device_downloads_and_stages_when_it_opens(
        pair: UpdatePair, tmp_path: Path) -> None:
    repo = published_site(pair, tmp_path)
    [member] = make_fleet(pair, tmp_path, 1)               # site=lab
    closed = parse_window_option(f"site=lab:apply={CLOSED};tz=UTC")
    _start(pair, repo, RolloutPlan(parse_waves("100%"), "fleet-window", windows=(closed,)))
    db = tmp_path / "rollout.db"
    # update.yaml's own apply window is open: the rollout's comes first.
    own = {"time_zone": "UTC", "apply_window": OPEN}
    with collector(repo, db, pair) as url:
        first = update(member, repo, url, own)
        assert first.state == "held" and first.bytes_on_wire > first.metadata_bytes
        assert status_text(member).startswith(
            f"held: outside the apply window {CLOSED} until "), status_text(member)
        assert "(the rollout's, for site=lab)" in status_text(member)
        assert [d.checksum for d in member.device.deployments()] == [pair.v1]
        [held] = _status(repo, db)["held"]
        assert held["machine_id"] == member.machine_id
        assert held["reason"].startswith(f"outside the apply window {CLOSED} until ")
        assert abs(held["since"] - dt.datetime.now().timestamp()) < 600
        _set_windows(pair, repo, parse_window_option(f"site=lab:apply={OPEN};tz=UTC"))
        second = update(member, repo, url, own)
        assert second.state == "staged", status_text(member)
        assert second.bytes_on_wire == second.metadata_bytes   # not downloaded again
    assert [d.checksum for d in member.device.deployments()] == [pair.v2, pair.v1]
    assert _status(repo, db)["held"] == []


def _verdicts(db: Path) -> int:
    store = Store(db)
    try:
        return store.verdict_count()
    finally:
        store.close()


def _set_windows(pair: UpdatePair, repo: Path, *windows: Any) -> None:
    """The admin moves the group's window: the statement is signed again with it."""
    site, key = Site(repo.parent), release_key(pair)
    try:
        with statements_lock(site.root):
            ref, stamp, rollout = site.statement(None)
            Signer(Runner(), key).sign(site, ref, stamp, replace(rollout, windows=windows))
    finally:
        stop_agent(Runner(), key.homedir)
