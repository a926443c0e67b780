"""The fleet's inventory (`rollout devices`): every enrolled or reporting device with the
version it booted when it last reported; a rolled-back device shows the version it runs,
not the one it tried, with the health check that failed; silent devices flagged.

Integration tier: devices sign their verdicts with the updater's own code and real openssl;
the collector records them in a real SQLite database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builder.rollout.collector import Collector
from builder.rollout.inventory import inventory
from builder.rollout.store import Store
from tests.rollout.support import devices, make_site, signer
from tests.support.cli import run_cli
from tests.support.keys import ReleaseKey

pytestmark = pytest.mark.integration
CHECK = "40-microshift-running-check.sh"
LOG = "timed out after 300s waiting for: the API server\nmicroshift.service: start failed"


def _fleet(tmp_path: Path, release_key: ReleaseKey) -> tuple[Path, list[str]]:
    """Four devices: one green on 2.0, one rolled back by greenboot, one with 2.0 staged,
    one enrolled that never reported."""
    key, _ = release_key
    site = make_site(tmp_path / "site", key)
    collector = Collector(site, Store(tmp_path / "rollout.db"), signer(key), False,
                          lambda line: None)
    green, rolled_back, staged, quiet = devices(tmp_path, 4)
    events = [(green, ["offered", "downloaded", "staged", "green"]),
              (rolled_back, ["offered", "downloaded", "staged", "rolled-back"]),
              (staged, ["offered", "downloaded", "staged"])]
    for device, sequence in events:
        for event in sequence:
            fields = {"failed_check": CHECK, "boots": 3, "failed_log": LOG} \
                if event == "rolled-back" else {}
            assert collector.take(device.verdict(event, **fields))[0] == 201
    collector.store.enroll(quiet.machine_id, quiet.outbox.key.public_pem(), {"site": "lab"})
    collector.store.close()
    return tmp_path / "rollout.db", [d.machine_id for d in (green, rolled_back, staged, quiet)]


def test_the_inventory_tells_what_each_device_runs(tmp_path: Path, release_key: ReleaseKey,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    db, (green, rolled_back, staged, quiet) = _fleet(tmp_path, release_key)
    assert run_cli("rollout", "devices", "--db", db, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    found = {d["machine_id"]: d for d in report["devices"]}
    assert set(found) == {green, rolled_back, staged, quiet}
    assert found[green]["booted_version"] == "2.0" and found[green]["last_event"] == "green"
    assert (found[rolled_back]["booted_version"], found[rolled_back]["last_event"],
            found[rolled_back]["failed_check"]) == ("1.0", "rolled-back", CHECK)
    assert found[rolled_back]["failed_log"] == LOG and found[green]["failed_log"] == ""
    assert found[staged]["booted_version"] == "1.0" and found[staged]["last_event"] == "staged"
    assert found[quiet]["last_contact"] is None and found[quiet]["enrolled"] is True
    assert [d["silent"] for d in report["devices"]].count(True) == report["silent"] == 1
    assert found[quiet]["silent"] and found[green]["labels"] == {"site": "lab"}
    assert run_cli("rollout", "devices", "--db", db) == 0
    text = capsys.readouterr().out
    line = next(row for row in text.splitlines() if row.startswith(rolled_back))
    assert "1.0" in line and f"rolled-back (wave 1 of fleet-test): {CHECK}" in line
    assert next(row for row in text.splitlines() if row.startswith(quiet)).split()[-2:] == [
        "never", "SILENT"]
    assert text.splitlines()[-1].startswith("4 devices, 1 silent")


def test_a_device_is_silent_once_its_last_verdict_is_older_than_the_threshold(
        tmp_path: Path, release_key: ReleaseKey) -> None:
    db, (green, *_) = _fleet(tmp_path, release_key)
    store = Store(db)
    try:
        [received] = store.db.execute("SELECT max(received) FROM verdicts WHERE machine_id = ?",
                                      (green,)).fetchone()
        by_id = {d.machine_id: d for d in inventory(store, received + 3600, 3600)}
        assert not by_id[green].silent
        by_id = {d.machine_id: d for d in inventory(store, received + 3601, 3600)}
        assert by_id[green].silent and by_id[green].last_contact == received
    finally:
        store.close()


def test_a_missing_database_or_threshold_out_of_range_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("rollout", "devices", "--db", tmp_path / "typo.db") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: command line: --db: ") and "typo.db does not exist" in err
    assert err.count("\n") == 2 and "hint: " in err   # the error, and where to look
    with pytest.raises(SystemExit) as caught:
        run_cli("rollout", "devices", "--db", tmp_path / "x.db", "--silent-after", "-1")
    assert caught.value.code == 2
    assert "-1 is not between 0 and 8760 hours" in capsys.readouterr().err


@pytest.mark.parametrize("log", ["\x1b[2J cleared the admin's terminal", "x" * 3000, 42])
def test_a_failure_log_that_is_not_short_printable_lines_is_refused(
        tmp_path: Path, release_key: ReleaseKey, log: object) -> None:
    key, _ = release_key
    collector = Collector(make_site(tmp_path / "site", key), Store(tmp_path / "rollout.db"),
                          signer(key), False, lambda line: None)
    [device] = devices(tmp_path, 1)
    code, answer = collector.take(device.verdict("rolled-back", failed_log=log))
    assert (code, answer["refused"]) == (400, "malformed")
    assert "failed_log is not lines of printable text" in answer["detail"]
    assert collector.store.verdict_count() == 0
