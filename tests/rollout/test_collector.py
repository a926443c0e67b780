"""The collector and the admin's commands: a verdict counts only when a device really signed
it, once; forged, replayed, foreign-device, malformed, oversized and unknown-rollout verdicts
are refused, counted, and leave every wave's numbers as they were; a wave over its halt
threshold halts the rollout in the signed statement; `advance` waits for the soak time and
the success threshold on a clock the test controls.

Integration tier: real openssl keys on the device side, real GPG signatures of the
statement, a real SQLite database."""

from __future__ import annotations

import base64
import json
from dataclasses import asdict
from pathlib import Path

import pytest

from builder.core.errors import BuildError
from builder.rollout.admin import advance, halt, open_wave, resume, status
from builder.rollout.collector import Collector
from builder.rollout.store import Store
from builder.updater.verdicts import MAX_VERDICT
from tests.rollout.support import (
    REF,
    T0,
    devices,
    make_site,
    rollout_of,
    signer,
    statement_verifies,
)
from tests.support.keys import ReleaseKey

pytestmark = pytest.mark.integration


def _collector(tmp_path: Path, release_key: ReleaseKey, *, enrolled_only: bool = False,
               waves: str = "site=lab,50%") -> Collector:
    key, _ = release_key
    site = make_site(tmp_path / "site", key, waves)
    return Collector(site, Store(tmp_path / "rollout.db"), signer(key), enrolled_only,
                     lambda line: None)


def _numbers(collector: Collector) -> list[dict[str, object]]:
    return [asdict(c) for c in collector.store.counts(rollout_of(collector.site))]


def _forge(body: bytes, **change: object) -> bytes:
    """The same envelope with its payload changed and the device's signature kept."""
    envelope = json.loads(body)
    payload = json.loads(base64.b64decode(envelope["payload"]))
    envelope["payload"] = base64.b64encode(json.dumps({**payload, **change}).encode()).decode()
    return json.dumps(envelope).encode()


def test_bad_verdicts_are_refused_counted_and_change_no_wave(tmp_path: Path,
                                                             release_key: ReleaseKey) -> None:
    collector = _collector(tmp_path, release_key)
    one, two = devices(tmp_path, 2)
    withheld = one.verdict("offered")   # taken on the way, sent after a newer one
    assert collector.take(one.verdict("staged"))[0] == 201
    before = _numbers(collector)
    impostor = devices(tmp_path / "impostor", 1)[0]
    impostor.machine_id = one.machine_id     # claims device one, signs with its own key
    # Signed by the device, but text no database takes: a lone surrogate.
    surrogate = one.verdict("green", failed_check="\udc80")
    bad = {
        "forged": _forge(one.verdict("staged"), event="green"),
        "replayed": withheld,
        "foreign-device": impostor.verdict("rolled-back"),
        "malformed": b'{"format": "nope"}',
        "unknown-rollout": two.verdict("green", rollout="another-rollout"),
        "too-large": b"x" * (MAX_VERDICT + 1),
    }
    for reason, body in bad.items():
        code, answer = collector.take(body)
        assert answer["refused"] == reason and code in (400, 403, 409, 413), (reason, answer)
    assert collector.take(surrogate)[1]["refused"] == "malformed"
    assert _numbers(collector) == before
    refused = collector.store.refusals()
    assert refused == {**dict.fromkeys(bad, 1), "malformed": 2}
    report = status(collector.site, collector.store, REF, T0)
    assert report["refused"] == refused and report["waves"][0]["staged"] == 1


def test_a_resent_verdict_counts_once(tmp_path: Path, release_key: ReleaseKey) -> None:
    """A device that did not get the answer sends the same file again."""
    collector = _collector(tmp_path, release_key)
    body = devices(tmp_path, 1)[0].verdict("green")
    assert collector.take(body) == (201, {"recorded": True})
    assert collector.take(body) == (200, {"recorded": False})
    assert collector.store.verdict_count() == 1 and collector.store.refusals() == {}
    assert collector.store.duplicates() == 1


def test_enrolled_only_takes_the_enrolled_key_only(tmp_path: Path,
                                                   release_key: ReleaseKey) -> None:
    collector = _collector(tmp_path, release_key, enrolled_only=True)
    device = devices(tmp_path, 1)[0]
    assert collector.take(device.verdict("offered"))[1]["refused"] == "unknown-device"
    collector.store.enroll(device.machine_id, device.outbox.key.public_pem())
    assert collector.take(device.verdict("offered"))[0] == 201


def test_a_wave_over_its_halt_threshold_halts_the_rollout_in_the_signed_statement(
        tmp_path: Path, release_key: ReleaseKey) -> None:
    collector = _collector(tmp_path, release_key)
    issued = collector.site.statement(REF)[1].issued
    lab = devices(tmp_path, 5)
    for device in lab:
        assert collector.take(device.verdict("staged"))[0] == 201
    # 1 of 5 that staged rolled back: 20%, not over the 20% threshold.
    assert "halted" not in collector.take(lab[0].verdict("rolled-back", boots=3,
                                                        failed_check="timed out"))[1]
    assert rollout_of(collector.site).state == "active"
    code, answer = collector.take(lab[1].verdict("rolled-back", boots=3))
    assert code == 201 and "2 of 5 devices that staged it rolled back" in answer["halted"]
    stamp = collector.site.statement(REF)[1]
    assert stamp.rollout is not None and stamp.rollout.state == "halted"
    assert stamp.issued > issued and statement_verifies(collector.site, release_key[1])
    wave = status(collector.site, collector.store, REF, T0)["waves"][0]
    assert (wave["staged"], wave["rolled_back"], wave["silent"]) == (5, 2, 3)
    assert wave["failed_checks"] == {"timed out": 1, "unknown": 1}


def test_advance_waits_for_the_soak_time_and_the_success_threshold(
        tmp_path: Path, release_key: ReleaseKey) -> None:
    collector = _collector(tmp_path, release_key)
    site, store, sign = collector.site, collector.store, signer(release_key[0])
    with pytest.raises(BuildError, match="has no device that reported"):
        advance(site, store, sign, REF, T0 + 3600)
    lab = devices(tmp_path, 2)
    collector.take(lab[0].verdict("green"))
    collector.take(lab[1].verdict("staged"))
    with pytest.raises(BuildError, match=r"soaked 3599s of its 3600s"):
        advance(site, store, sign, REF, T0 + 3599)
    with pytest.raises(BuildError, match=r"1 of 2 devices green \(50.0%\), under"):
        advance(site, store, sign, REF, T0 + 3600)
    collector.take(lab[1].verdict("green"))
    rollout = advance(site, store, sign, REF, T0 + 3600)
    assert open_wave(rollout) == 1 and rollout.waves[1].opened == T0 + 3600
    assert rollout_of(site) == rollout
    halted = halt(site, sign, REF, "looking into a report")
    assert halted.state == "halted"
    with pytest.raises(BuildError, match="is halted"):
        advance(site, store, sign, REF, T0 + 9999, force=True)
    assert resume(site, sign, REF).state == "active"
    forced = advance(site, store, sign, REF, T0 + 3601, force=True)
    assert open_wave(forced) == 2 and statement_verifies(site, release_key[1])
