"""The freshness statement's rules, without a server: what makes a device refuse an index as
stale or replayed (builder/updater/freshness.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builder.updater.freshness import (
    AcceptedFile,
    Timestamp,
    check_fresh,
    parse_timestamp,
    timestamp_for,
)
from builder.updater.index import UpdateRefused
from builder.updater.state import DamagedState

REF = "microshift/x86_64/microshift-minimal"
INDEX = b'{"format": "index"}\n'
NOW = 1_800_000_000


def _check(stamp: Timestamp, *, accepted: Timestamp | None = None, now: float = NOW,
           ref: str = REF, index: bytes = INDEX) -> None:
    check_fresh(stamp, ref, index, accepted=accepted, now=now, what="timestamp.json")


def test_a_current_statement_for_the_served_index_passes_and_round_trips() -> None:
    stamp = timestamp_for(REF, INDEX, 3600, now=NOW)
    assert parse_timestamp(stamp.to_json().encode(), "t") == stamp
    _check(stamp)
    _check(stamp, now=NOW + 3599, accepted=stamp)


@pytest.mark.parametrize(("case", "words"), [
    ("expired", "expired at"),
    ("other-ref", "names ref"),
    ("other-index", "names another index"),
    ("older-than-accepted", "a replayed index"),
    ("same-second-other-index", "a replayed index"),
])
def test_stale_replayed_and_foreign_statements_are_refused(case: str, words: str) -> None:
    stamp = timestamp_for(REF, INDEX, 3600, now=NOW)
    newer = timestamp_for(REF, INDEX, 3600, now=NOW + 10)
    other = Timestamp(REF, "0" * 64, NOW, NOW + 3600)
    calls = {
        "expired": lambda: _check(stamp, now=NOW + 3600),
        "other-ref": lambda: _check(stamp, ref="microshift/x86_64/other"),
        "other-index": lambda: _check(stamp, index=INDEX + b" "),
        "older-than-accepted": lambda: _check(stamp, accepted=newer),
        "same-second-other-index": lambda: _check(stamp, accepted=other),
    }
    with pytest.raises(UpdateRefused, match=words):
        calls[case]()


@pytest.mark.parametrize("document", [
    b"not json", b"[]", b'{"format": "other"}',
    json.dumps({"format": "microshift-edge-builder/index-timestamp/v1", "ref": REF,
                "index_sha256": "ab", "issued": 1, "expires": 2}).encode(),
    json.dumps({"format": "microshift-edge-builder/index-timestamp/v1", "ref": REF,
                "index_sha256": "a" * 64, "issued": 5, "expires": 5}).encode(),
    json.dumps({"format": "microshift-edge-builder/index-timestamp/v1", "ref": REF,
                "index_sha256": "a" * 64, "issued": True, "expires": 9}).encode(),
])
def test_malformed_statements_are_refused(document: bytes) -> None:
    with pytest.raises(UpdateRefused):
        parse_timestamp(document, "timestamp.json")


def test_the_accepted_statement_survives_per_ref_and_a_damaged_file_stops_updates(
        tmp_path: Path) -> None:
    """Read as empty, a file cut short (power loss, a full disk) would let a replayed older
    statement be accepted and overwrite it: a damaged file is refused, never empty."""
    accepted = AcceptedFile(tmp_path / "state" / "accepted-index.json")
    assert accepted.get(REF) is None
    stamp = timestamp_for(REF, INDEX, 60, now=NOW)
    accepted.put(stamp)
    accepted.put(timestamp_for("other/ref", INDEX, 60, now=NOW))
    assert AcceptedFile(accepted.path).get(REF) == stamp
    for damage in ("{broken", "", '{"' + REF + '": {"issued": "yesterday"}}', "[]"):
        accepted.path.write_text(damage)
        with pytest.raises(DamagedState) as caught:
            accepted.get(REF)
        assert str(caught.value).startswith(f"{accepted.path} is damaged (")
        with pytest.raises(DamagedState):
            accepted.put(stamp)  # nor overwritten with what the replay would bring
        assert accepted.path.read_text() == damage
