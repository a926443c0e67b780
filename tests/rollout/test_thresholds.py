"""A wave's thresholds over modelled waves (builder/rollout/admin.py): the next wave opens only
after the soak time and with at least the success threshold green, and a wave halts the
rollout exactly when more than its halt threshold of the devices that staged rolled back;
more rollbacks never undo a halt, more green devices never block an advance."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from builder.rollout.admin import not_ready, over_halt_threshold
from builder.rollout.store import WaveCounts
from builder.updater.waves import Wave

OUTCOMES = st.lists(st.sampled_from(["green", "rolled-back", "staged", "offered"]),
                    max_size=400)
PERCENT = st.integers(min_value=0, max_value=100)
pytestmark = pytest.mark.fuzz


def _counts(outcomes: list[str]) -> WaveCounts:
    """A modelled wave: each device's furthest verdict."""
    staged = sum(o != "offered" for o in outcomes)
    return WaveCounts(offered=len(outcomes), downloaded=staged, staged=staged,
                      green=outcomes.count("green"), rolled_back=outcomes.count("rolled-back"))


def _wave(success: int = 95, halt: int = 20, soak: int = 3600) -> Wave:
    return Wave("w", 30.0, (), soak, float(success), float(halt), opened=1_000)


@given(outcomes=OUTCOMES, halt=PERCENT)
def test_a_wave_halts_exactly_over_its_halt_threshold(outcomes: list[str], halt: int) -> None:
    counts = _counts(outcomes)
    reason = over_halt_threshold(_wave(halt=halt), counts)
    # In whole numbers: rolled back / staged > halt / 100.
    assert (reason is not None) == (counts.rolled_back * 100 > halt * counts.staged)
    more = _counts([*outcomes, "rolled-back"])
    assert reason is None or over_halt_threshold(_wave(halt=halt), more) is not None


@given(outcomes=OUTCOMES, success=PERCENT, waited=st.integers(min_value=0, max_value=7200))
def test_the_next_wave_opens_after_the_soak_with_enough_green(
        outcomes: list[str], success: int, waited: int) -> None:
    counts = _counts(outcomes)
    reason = not_ready(_wave(success=success), counts, 1_000 + waited)
    expected = waited >= 3600 and counts.offered > 0 and \
        counts.green * 100 >= success * counts.offered
    assert (reason is None) == expected, reason
    if reason is None:
        greener = _counts([*outcomes, "green"])
        assert not_ready(_wave(success=success), greener, 1_000 + waited) is None
