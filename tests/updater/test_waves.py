"""Which devices a rollout's waves select (builder/updater/waves.py), over a modelled fleet
of 100,000 machine ids: the shares an admin asks for are the shares devices take, the same
rollout id keeps every device's wave from release to release, and a device outside the open
waves, or of a halted rollout, is held with a reason it can show."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builder.core.errors import InputError
from builder.publish.rollout_statement import RolloutPlan, parse_waves
from builder.updater.freshness import parse_timestamp, timestamp_for
from builder.updater.index import UpdateRefused
from builder.updater.waves import Rollout, hold_reason, parse_rollout, place, wave_of

FLEET = [hashlib.md5(str(n).encode()).hexdigest() for n in range(100_000)]  # machine ids
COMMIT, NEXT = "a" * 64, "b" * 64


def _rollout(text: str, rollout_id: str = "edge-canary", commit: str = COMMIT) -> Rollout:
    return RolloutPlan(parse_waves(text), rollout_id).start("edge", commit, 1_000)


def _shares(rollout: Rollout, fleet: list[str]) -> list[float]:
    """The cumulative share of the fleet in each wave and those before it, in percent."""
    counts = Counter(wave_of(rollout, machine, {}) for machine in fleet)
    total, shares = 0, []
    for number in range(len(rollout.waves)):
        total += counts[number]
        shares.append(100.0 * total / len(fleet))
    return shares


def test_wave_shares_over_100000_devices_are_within_one_point() -> None:
    rollout = _rollout("1%,10%,50%,100%")
    for wanted, got in zip((1, 10, 50, 100), _shares(rollout, FLEET), strict=True):
        assert abs(got - wanted) <= 1.0, (wanted, got)


@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=99), min_size=1, max_size=5,
                     unique=True))
def test_any_shares_are_taken_within_one_and_a_half_points(cuts: list[int]) -> None:
    percents = sorted(cuts)
    rollout = _rollout(",".join(f"{p}%" for p in percents))
    shares = _shares(rollout, FLEET[:20_000])
    for wanted, got in zip([*percents, 100], shares, strict=True):
        assert abs(got - wanted) <= 1.5, (wanted, got)


def test_the_same_rollout_id_keeps_every_device_in_its_wave_across_releases() -> None:
    first = _rollout("1%,10%,50%", commit=COMMIT)
    second = _rollout("1%,10%,50%", commit=NEXT)
    assert all(wave_of(first, m, {}) == wave_of(second, m, {}) for m in FLEET)
    other = _rollout("1%,10%,50%", rollout_id="edge-other", commit=NEXT)
    moved = sum(wave_of(first, m, {}) != wave_of(other, m, {}) for m in FLEET)
    assert moved > len(FLEET) // 5   # a new id is a new draw of devices


def test_label_waves_take_their_devices_first_and_shares_the_rest() -> None:
    rollout = _rollout("site=lab,tier=canary+site=madrid,30%")
    assert wave_of(rollout, FLEET[0], {"site": "lab", "tier": "x"}) == 0
    assert wave_of(rollout, FLEET[0], {"site": "madrid", "tier": "canary"}) == 1
    assert wave_of(rollout, FLEET[0], {"site": "madrid"}) in (2, 3)   # not every label
    assert [w.selector() for w in rollout.waves] == ["site=lab", "site=madrid,tier=canary",
                                                     "30%", "100%"]


def test_a_device_outside_the_open_waves_or_of_a_halted_rollout_is_held() -> None:
    rollout = _rollout("1%,50%")
    late = next(m for m in FLEET if place(rollout.id, m) >= 50)
    early = next(m for m in FLEET if place(rollout.id, m) < 1)
    assert hold_reason(rollout, wave_of(rollout, early, {})) is None
    reason = hold_reason(rollout, wave_of(rollout, late, {}))
    assert reason is not None and "in wave 3 (everyone-100%: 100%), not open yet (1 of 3 " \
        "open)" in reason
    halted = replace(rollout, state="halted", reason="wave 1: 3 of 3 rolled back")
    reason = hold_reason(halted, 0)
    assert reason is not None and "is halted (wave 1: 3 of 3 rolled back)" in reason
    assert hold_reason(replace(rollout, state="complete"), 2) is None


def test_the_rollout_survives_the_signed_statement_round_trip() -> None:
    rollout = _rollout("site=lab,30%")
    stamp = timestamp_for("edge", b"{}", 3600, now=2_000, rollout=rollout)
    assert parse_timestamp(stamp.to_json().encode(), "timestamp.json") == stamp
    plain = timestamp_for("edge", b"{}", 3600, now=2_000)
    assert "rollout" not in json.loads(plain.to_json())


@pytest.mark.parametrize(("change", "words"), [
    ({"state": "paused"}, "rollout.state is 'paused'; allowed: active, halted, complete"),
    ({"state": ["active"]}, "rollout.state is a list; allowed: active, halted, complete"),
    ({"id": "no spaces allowed"}, "rollout.id is 'no spaces allowed'; allowed: a rollout id"),
    ({"commit": "abc"}, "rollout.commit is 'abc'; allowed: a commit checksum"),
    ({"reason": {"why": 1}}, "rollout.reason is an object; allowed: a string"),
    ({"waves": []}, "rollout.waves is empty; allowed: at least one wave"),
    ({"waves": {"0": 1}}, "rollout.waves is an object; allowed: a list"),
    ({"waves": [{"name": "w", "percent": 30, "labels": {}}]}, "the last rollout wave is not 100%"),
    ({"waves": [{"name": "w", "percent": 101}]},
     "rollout.waves[0].percent is 101; allowed: a number from 0 to 100"),
    ({"waves": [{"name": "w", "percent": 0}]},
     "rollout.waves[0].percent is 0; allowed: a number in (0, 100]"),
    ({"waves": [{"name": "w", "percent": "100"}]},
     "rollout.waves[0].percent is a string; allowed: a number"),
    ({"waves": [{"name": "w", "percent": 100, "labels": {"a": "b"}}]},
     "rollout.waves[0].percent and labels: one of them is needed, not both"),
    ({"waves": [{"name": "w", "percent": 100, "opened": -1}]},
     "rollout.waves[0].opened is -1; allowed: an integer from 0 to"),
    ({"waves": [{"name": "w", "percent": 100, "halt_threshold": 120}]},
     "rollout.waves[0].halt_threshold is 120; allowed: a number from 0 to 100"),
    ({"waves": [{"name": "w", "percent": 100, "soak_seconds": True}]},
     "rollout.waves[0].soak_seconds is true or false; allowed: an integer"),
    ({"waves": [7]}, "rollout.waves[0] is an integer; allowed: an object"),
])
def test_a_bad_rollout_in_a_statement_is_refused_naming_the_field(
        change: dict[str, object], words: str) -> None:
    document = {**_rollout("30%").to_dict(), **change}
    with pytest.raises(UpdateRefused) as caught:
        parse_rollout(document, "timestamp.json")
    assert str(caught.value).startswith(f"timestamp.json: {words}"), str(caught.value)


@pytest.mark.parametrize(("text", "words"), [
    ("50%,10%", "shares grow wave by wave"), ("site", "neither a share"),
    ("", "neither a share"), ("150%", "shares grow"), ("site=lab,,", "neither a share")])
def test_bad_waves_on_the_command_line_are_one_line(text: str, words: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_waves(text)
    assert caught.value.field == "--rollout-waves" and words in str(caught.value)
    assert "\n" not in str(caught.value)


def test_waves_end_with_everyone_and_start_open() -> None:
    rollout = _rollout("site=lab,30%")
    assert [w.percent for w in rollout.waves] == [None, 30.0, 100.0]
    assert [w.opened for w in rollout.waves] == [1_000, None, None]
    assert rollout.open_count == 1
