"""A rollout's budget and per-group windows (builder/updater/rollout_rules.py) as the
signed statement carries them: they survive the round trip, a malformed one refuses the
whole statement with one line naming the field and what is allowed, and the command-line
forms (--rollout-budget, --rollout-window) refuse bad text with one line, no traceback."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from builder.core.errors import InputError
from builder.publish.rollout_statement import (
    RolloutPlan,
    parse_budget_option,
    parse_waves,
    parse_window_option,
)
from builder.updater.freshness import parse_timestamp, timestamp_for
from builder.updater.index import UpdateRefused
from builder.updater.rollout_rules import Budget, windows_for
from builder.updater.waves import Rollout, parse_rollout
from tests.support.cli import run_cli

COMMIT = "a" * 64


def _rollout(budget: str = "site=25%", *windows: str) -> Rollout:
    plan = RolloutPlan(parse_waves("site=lab,100%"), "edge", parse_budget_option(budget),
                       tuple(parse_window_option(w) for w in windows))
    return plan.start("edge", COMMIT, 1_000)


def test_a_budget_and_windows_survive_the_signed_statement() -> None:
    rollout = _rollout("site=1", "site=lab:apply=Sat,Sun 01:00-05:00;tz=UTC",
                       "site=field+tier=edge:download=22:00-06:00")
    assert rollout.budget is not None
    granted = Rollout(rollout.id, rollout.commit, waves=rollout.waves, windows=rollout.windows,
                      budget=Budget("site", 1, (("", ("ab12",)), ("lab", ("cd34", "ef56")))))
    for each in (rollout, granted):
        stamp = timestamp_for("edge", b"index", 3600, now=1_000, rollout=each)
        assert parse_timestamp(stamp.to_json().encode(), "timestamp.json").rollout == each
    lab = windows_for(rollout.windows, {"site": "lab"})
    assert lab is not None and lab.apply is not None and lab.download is None
    assert lab.apply.text() == "Sat,Sun 01:00-05:00" and lab.time_zone == "UTC"
    assert windows_for(rollout.windows, {"site": "field"}) is None   # not every label
    field = windows_for(rollout.windows, {"site": "field", "tier": "edge"})
    assert field is not None and field.download is not None and field.download.start == 22 * 60
    assert Budget("site", "25%").limit(5) == 2 and Budget("site", "1%").limit(0) == 1
    assert Budget("site", 3).limit(1) == 3


def _document(**change: Any) -> dict[str, Any]:
    document = _rollout("site=1", "site=lab:apply=01:00-05:00").to_dict()
    for key, value in change.items():
        target, _, field = key.partition("__")
        if field:
            document[target] = {**document[target], field: value}
        else:
            document[key] = value
    return document


@pytest.mark.parametrize(("change", "message"), [
    ({"budget__max": 0}, "rollout.budget.max is '0'; allowed: a number of devices"),
    ({"budget__max": "150%"}, "rollout.budget.max is '150%'; allowed:"),
    ({"budget__max": True}, "rollout.budget.max is 'True'; allowed:"),
    ({"budget__max": "7"}, "rollout.budget.max is '7'; allowed:"),
    ({"budget__group_by": "si te"}, "rollout.budget.group_by is 'si te'; allowed: a label"),
    ({"budget__grants": []}, "rollout.budget.grants is a list; allowed: an object"),
    ({"budget__grants": {"lab": ["ab", "ab"]}}, "rollout.budget.grants.lab is not a list "
                                                "of distinct machine ids"),
    ({"budget__grants": {"lab": ["not-an-id"]}}, "rollout.budget.grants.lab is not a list"),
    ({"budget__grants": {"a b": []}}, "rollout.budget.grants.a b is not a label value"),
    ({"budget__grants": {f"g{n}": [] for n in range(1001)}},
     "rollout.budget.grants has 1001 groups; allowed: at most 1000"),
    ({"budget__grants": {f"g{n}": [f"{n:04d}{m:04d}" for m in range(1000)]
                         for n in range(11)}},
     "rollout.budget.grants grants 11000 devices; allowed: at most 10000"),
    ({"budget": "site=1"}, "rollout.budget is a string; allowed: an object"),
    ({"windows": [{"labels": {"site": "lab"}, "apply": "25:00-26:00"}]},
     "rollout.windows[0].apply is '25:00-26:00'; allowed: [DAYS ]HH:MM-HH:MM"),
    ({"windows": [{"labels": {"site": "lab"}, "apply": "01:00-01:00"}]},
     "rollout.windows[0].apply is '01:00-01:00', empty"),
    ({"windows": [{"labels": {}, "apply": "01:00-02:00"}]},
     "rollout.windows[0].labels is empty"),
    ({"windows": [{"labels": {"site": "lab"}}]},
     "rollout.windows[0].apply and download are both missing"),
    ({"windows": [{"labels": {"site": "lab"}, "apply": "01:00-02:00", "time_zone": "Mars/X"}]},
     "rollout.windows[0].time_zone is 'Mars/X'; allowed: a tz database name"),
    ({"windows": [{"labels": {"site": "lab"}, "apply": "01:00-02:00"}] * 101},
     "rollout.windows has 101 items; allowed: at most 100"),
])
def test_a_malformed_budget_or_window_refuses_the_statement_in_one_line(
        change: dict[str, Any], message: str) -> None:
    with pytest.raises(UpdateRefused) as refused:
        parse_rollout(_document(**change), "timestamp.json")
    assert str(refused.value).startswith(f"timestamp.json: {message}"), str(refused.value)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(("option", "text", "message"), [
    ("budget", "site", "'site' is not LABEL=MAX"),
    ("budget", "site=0", "'site=0' is not LABEL=MAX"),
    ("budget", "site=101%", "'site=101%' is not LABEL=MAX"),
    ("window", "apply=01:00-02:00", "does not start with a group"),
    ("window", "site=lab:apply=1:00-2:00", "apply='1:00-2:00': allowed: [DAYS ]HH:MM"),
    ("window", "site=lab:reboot=01:00-02:00", "'reboot=01:00-02:00' in"),
    ("window", "site=lab:apply=01:00-02:00;apply=03:00-04:00", "'apply=03:00-04:00' in"),
    ("window", "site=lab:tz=UTC", "names no window"),
    ("window", "site=lab:apply=01:00-02:00;tz=Nowhere", "tz='Nowhere' is not a time zone"),
])
def test_bad_budget_and_window_options_are_one_line(option: str, text: str,
                                                    message: str) -> None:
    parse = parse_budget_option if option == "budget" else parse_window_option
    with pytest.raises(InputError) as error:
        parse(text)
    assert message in str(error.value) and "\n" not in str(error.value), str(error.value)


def test_rollout_start_with_a_bad_budget_says_so_without_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "updates").mkdir()
    code = run_cli("rollout", "start", "--site", tmp_path, "--ref", "edge",
                   "--rollout-waves", "100%", "--rollout-budget", "site=lots")
    err = capsys.readouterr().err
    assert code != 0 and "--rollout-budget" in err and "'site=lots' is not LABEL=MAX" in err
    assert "Traceback" not in err


def test_a_rollout_window_is_read_in_its_own_zone() -> None:
    lab = parse_window_option("site=lab:apply=10:00-11:00;tz=Asia/Tokyo")
    device_now = dt.datetime(2026, 1, 5, 1, 30, tzinfo=dt.UTC)     # 10:30 in Tokyo
    assert lab.apply is not None and lab.apply.contains(lab.now(device_now))
    assert not lab.apply.contains(device_now)
