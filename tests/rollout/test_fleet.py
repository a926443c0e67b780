"""A release rolled out to a fleet of simulated devices that really boot, fail and roll back
(tests/rollout/fleet.py): a bad release halts after wave 1 by itself and no device of a later
wave downloads a byte of it; a good release goes through every wave to 100%, each wave
opening only after the one before soaked and was green, on a clock the test controls.

`nox -s tests` runs a fleet of 4 devices; `nox -s fleet` the acceptance's 20.
Integration tier: real ostree, GPG, openssl, greenboot's scripts, the collector process."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from builder.core.errors import BuildError
from builder.core.runner import Runner
from builder.device.commits import UpdatePair
from builder.device.health_server import Health
from builder.rollout.admin import Signer, Site, advance, status
from builder.rollout.store import Store
from tests.rollout import fleet
from tests.rollout.fleet import (
    SOAK,
    T0,
    FleetDevice,
    boot,
    collector,
    fleet_size,
    make_fleet,
    published_site,
    release_key,
    start_rollout,
    status_text,
    update,
)
from tests.support import requires

pytestmark = [pytest.mark.integration, fleet.tier,
              requires.root_only("booting the simulated devices makes network namespaces"),
              pytest.mark.usefixtures("deletable_sysroots")]


def _wave(fleet: list[FleetDevice], number: int) -> list[FleetDevice]:
    return [member for member in fleet if member.wave == number]


def _admin(pair: UpdatePair, repo: Path, db: Path, now: int) -> object:
    store = Store(db)
    try:
        return advance(Site(repo.parent), store, Signer(Runner(), release_key(pair)), None,
                       now)
    finally:
        store.close()


def test_a_bad_release_halts_after_wave_1_and_later_waves_download_nothing(
        pair: UpdatePair, tmp_path: Path) -> None:
    repo = published_site(pair, tmp_path)
    fleet = make_fleet(pair, tmp_path, fleet_size())
    start_rollout(pair, repo, fleet)
    db = tmp_path / "rollout.db"
    lab, later = _wave(fleet, 0), [m for m in fleet if m.wave > 0]
    with collector(repo, db, pair) as url:
        for member in fleet:
            update(member, repo, url)
        for member in later:
            assert "not open yet (1 of 3 open)" in status_text(member), member.name
        for member in lab:
            assert member.reports[-1].target == pair.v2
            boot(member, pair, Health(ready_after=None))   # greenboot rolls it back
            assert member.device.deployments()[0].checksum == pair.v1
            update(member, repo, url)                      # reports rolled-back
        with pytest.raises(BuildError, match="is halted"):
            _admin(pair, repo, db, T0 + SOAK)
        for member in later:
            update(member, repo, url)
            assert "is halted (wave 1: " in status_text(member), status_text(member)
    for member in later:
        # The server sent them the signed metadata and not one byte of the update.
        assert all(r.bytes_on_wire == r.metadata_bytes for r in member.reports), member.name
        assert not member.device.repo.has_commit(pair.v2)
    report = _status(repo, db)
    assert report["state"] == "halted"
    first = report["waves"][0]
    assert (first["offered"], first["rolled_back"], first["green"]) == (len(lab), len(lab), 0)
    assert all(w["offered"] == 0 for w in report["waves"][1:])
    # greenboot's red.d hook noted each failed boot and the check that failed it.
    [(check, count)] = first["failed_checks"].items()
    assert count == len(lab) and check.startswith("timed out after 3s waiting for: ")
    store = Store(db)
    boots = store.db.execute("SELECT boots FROM verdicts WHERE event = 'rolled-back'")
    assert [row[0] for row in boots] == [3] * len(lab)
    # ...and the failure log's last lines, which the console unfolds under the check.
    logs = [row[0] for row in store.db.execute(
        "SELECT failed_log FROM verdicts WHERE event = 'rolled-back'")]
    assert len(logs) == len(lab) and all(
        log.startswith("timed out after 3s waiting for: ") for log in logs), logs
    store.close()
    _record("bad-release", fleet, report)


def test_a_good_release_goes_through_every_wave_to_the_whole_fleet(
        pair: UpdatePair, tmp_path: Path) -> None:
    repo = published_site(pair, tmp_path)
    fleet = make_fleet(pair, tmp_path, fleet_size())
    rollout = start_rollout(pair, repo, fleet)
    db = tmp_path / "rollout.db"
    with collector(repo, db, pair) as url:
        for number in range(len(rollout.waves)):
            opened = T0 + number * SOAK
            for member in (m for m in fleet if m.wave >= number):   # the rest are on v2
                update(member, repo, url)
                if member.wave > number:
                    assert "not open yet" in status_text(member), member.name
                    assert not member.device.repo.has_commit(pair.v2)
            for member in _wave(fleet, number):
                boot(member, pair, Health())
                assert member.device.deployments()[0].checksum == pair.v2
                update(member, repo, url)                  # reports green
            with pytest.raises(BuildError, match=f"soaked {SOAK - 1}s of its {SOAK}s"):
                _admin(pair, repo, db, opened + SOAK - 1)
            _admin(pair, repo, db, opened + SOAK)
    report = _status(repo, db)
    assert report["state"] == "complete"
    assert [w["green"] for w in report["waves"]] == \
        [len(_wave(fleet, n)) for n in range(len(rollout.waves))]
    assert sum(w["green"] for w in report["waves"]) == len(fleet)
    assert all(w["rolled_back"] == 0 and w["silent"] == 0 for w in report["waves"])
    assert [w["opened"] for w in report["waves"]] == \
        [T0 + n * SOAK for n in range(len(rollout.waves))]
    assert all(m.device.deployments()[0].checksum == pair.v2 for m in fleet)
    _record("good-release", fleet, report)


def _record(test: str, fleet: list[FleetDevice], report: dict[str, Any]) -> None:
    """With MSEB_FLEET_REPORT=FILE (`nox -s fleet`), what the fleet did, for
    docs/benchmarks.md."""
    path = os.environ.get("MSEB_FLEET_REPORT")
    if not path:
        return
    held = [m for m in fleet if m.wave > 0]
    record = {"devices": len(fleet), "waves": [len(_wave(fleet, n)) for n in
                                               range(len(report["waves"]))],
              "state": report["state"], "reason": report["reason"],
              "status": [{k: w[k] for k in ("offered", "downloaded", "staged", "green",
                                            "rolled_back", "silent", "opened")}
                         for w in report["waves"]],
              "later_wave_update_bytes": sum(r.bytes_on_wire - r.metadata_bytes
                                             for m in held for r in m.reports),
              "later_wave_metadata_bytes": sum(r.metadata_bytes for m in held
                                               for r in m.reports),
              "later_wave_runs": sum(len(m.reports) for m in held)}
    file = Path(path)
    data = json.loads(file.read_text()) if file.is_file() else {}
    file.write_text(json.dumps({**data, test: record}, indent=2, sort_keys=True) + "\n")


def _status(repo: Path, db: Path) -> dict[str, Any]:
    store = Store(db)
    try:
        return status(Site(repo.parent), store, None, T0)
    finally:
        store.close()
