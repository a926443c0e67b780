"""/etc/microshift/update.yaml: the device's reader (builder/updater/update_config.py, Python 3.9
and PyYAML) and the model the JSON Schema comes from (builder/updater/update_model.py) accept and
refuse the same documents; a bad value is one line naming the key."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml
from hypothesis import given
from pydantic import ValidationError

from builder.core.errors import InputError
from builder.updater.update_config import (
    LIMITS,
    UpdateConfig,
    Window,
    load_update_config,
    parse_update_config,
    parse_window,
)
from builder.updater.update_model import UpdateDocument
from builder.updater.windows import closed
from tests.support.cli import PROJECT_ROOT
from tests.support.mutations import check_schema_agrees, mutated, schema_validator

SHIPPED = PROJECT_ROOT / "specs/sources/microshift-update/etc/microshift/update.yaml"
FULL = {"remote": "edge", "updates_url": "https://updates.example.com/edge/updates/",
        "max_bytes_per_second": 625000, "staging_max_bytes": 2 * 1024 ** 3, "retries": 3,
        "retry_delay_seconds": 10, "timeout_seconds": 30, "reboot": True,
        "maintenance_window": "23:30-02:00", "allow_downgrade": False,
        "download_window": "Mon-Fri 22:00-02:00", "apply_window": "Sat,Sun 01:00-05:00",
        "time_zone": "Europe/Madrid",
        "collector_url": "https://fleet.example.com/verdicts",
        "labels": {"site": "madrid", "tier": "canary"}}


def _model_accepts(doc: Any) -> bool:
    try:
        UpdateDocument.model_validate(doc)
    except ValidationError:
        return False
    return True


@pytest.mark.fuzz
@given(doc=mutated(FULL))
def test_device_reader_and_model_agree(doc: Any) -> None:
    try:
        parse_update_config({} if doc is None else doc, "update.yaml")
        reader = True
    except InputError as exc:
        assert "\n" not in str(exc) and exc.field, str(exc)
        reader = False
    assert reader == _model_accepts({} if doc is None else doc), doc
    check_schema_agrees(UpdateDocument, schema_validator("update"), {} if doc is None else doc)


def test_the_shipped_file_states_the_defaults() -> None:
    assert load_update_config(SHIPPED) == UpdateConfig()
    assert UpdateDocument.model_validate(yaml.safe_load(SHIPPED.read_text()))


def test_a_missing_or_empty_file_means_every_default(tmp_path: Path) -> None:
    assert load_update_config(tmp_path / "absent.yaml") == UpdateConfig()
    (tmp_path / "empty.yaml").write_text("# nothing set\n")
    assert load_update_config(tmp_path / "empty.yaml") == UpdateConfig()


def test_every_value_set_is_read() -> None:
    parsed = parse_update_config({
        "remote": "edge-fleet", "updates_url": "https://updates.example.com/edge/updates//",
        "max_bytes_per_second": 10 * 1024 ** 3, "staging_max_bytes": 1024 * 1024,
        "retries": 1000, "retry_delay_seconds": 86400, "timeout_seconds": 1, "reboot": True,
        "maintenance_window": "23:30-01:15", "allow_downgrade": True}, "update.yaml")
    assert parsed == UpdateConfig(
        remote="edge-fleet", updates_url="https://updates.example.com/edge/updates/",
        max_bytes_per_second=10 * 1024 ** 3, staging_max_bytes=1024 * 1024, retries=1000,
        retry_delay_seconds=86400, timeout_seconds=1, reboot=True,
        maintenance_window=Window(23 * 60 + 30, 75), allow_downgrade=True)
    both = parse_update_config({"download_window": "Mon-Fri 22:00-02:00",
                                "apply_window": "Sat 01:00-05:00", "time_zone": "UTC"}, "u")
    assert both.download_window == Window(22 * 60, 120, frozenset(range(5)))
    assert both.apply_window == Window(60, 300, frozenset({5}))
    assert both.time_zone == "UTC"
    # Only the slashes at the end are one slash: the path itself is kept as written.
    for url in ("https://mirror.example/X", "https://mirror.example/X/"):
        assert parse_update_config({"updates_url": url}, "u.yaml").updates_url == \
            "https://mirror.example/X/"
    # Every limit's bounds are inclusive.
    for key, (_, low, high, _) in LIMITS.items():
        for value in (low, high):
            assert getattr(parse_update_config({key: value}, "u.yaml"), key) == value


@pytest.mark.parametrize(("text", "field", "words"), [
    ("max_bytes_per_second: -1\n", "max_bytes_per_second", "0 (no cap) or bytes per second"),
    ("retries: 1001\n", "retries",
     "retries: 1001 is not allowed; allowed: 0..1000 attempts after the first (at most 1000)"),
    ("maintenance_window: '25:00-01:00'\n", "maintenance_window",
     "maintenance_window: '25:00-01:00' is not allowed; allowed: [DAYS ]HH:MM-HH:MM (24-hour, "
     "the device's time zone, e.g. 02:00-04:30 or 'Sat,Sun 01:00-05:00'"),
    ("apply_window: 'Sunday 01:00-02:00'\n", "apply_window", "allowed: [DAYS ]HH:MM-HH:MM"),
    ("download_window: '01:00-01:00'\n", "download_window", "is empty; allowed: a window"),
    ("time_zone: Mars/Olympus_Mons\n", "time_zone",
     "time_zone: 'Mars/Olympus_Mons' is not allowed; allowed: a time zone of the tz database"),
    ("time_zone: ../../etc/passwd\n", "time_zone", "a time zone of the tz database"),
    ("maintenance_window: '02:00-02:00'\n", "maintenance_window",
     "maintenance_window: '02:00-02:00' is empty; allowed: a window whose start and end "
     "differ"),
    ("reboot: 'yes'\n", "reboot", "true or false"),
    ("updates_url: ftp://x/\n", "updates_url",
     "updates_url: 'ftp://x/' is not allowed; allowed: an http://, https:// or file:/// "
     "URL without spaces"),
    ("collector_url: file:///x\n", "collector_url", "allowed: an http:// or https:// URL"),
    ("labels: {site: [a]}\n", "labels", "at most 32 labels"),
    ("labels: {-x: a}\n", "labels", "at most 32 labels"),
    ("remote: 'bad name'\n", "remote", "remote: 'bad name' is not allowed; allowed: an "
                                       "ostree remote name (letters, digits, '.', '_', '-')"),
    ("retries: 5\nbandwidth: 10\n", "bandwidth", "allowed keys here"),
])
def test_a_bad_value_names_the_key(tmp_path: Path, text: str, field: str, words: str) -> None:
    path = tmp_path / "update.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        load_update_config(path)
    assert caught.value.field == field and words in str(caught.value)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(("window", "inside", "outside"), [
    ("02:00-04:00", ["Mon 02:00", "Sun 03:59"], ["Mon 04:00", "Tue 01:59", "Wed 12:00"]),
    ("23:30-01:00", ["Mon 23:30", "Tue 00:00", "Sun 00:59"], ["Mon 01:00", "Mon 23:29"]),
    ("Sat,Sun 01:00-05:00", ["Sat 01:00", "Sun 04:59"], ["Fri 02:00", "Mon 02:00"]),
    # The hours after midnight belong to the day the window opened on.
    ("Fri 22:00-02:00", ["Fri 22:00", "Sat 01:59"], ["Thu 23:00", "Fri 01:00", "Sat 22:00"]),
    ("Mon-Wed,Sat 10:00-11:00", ["Mon 10:00", "Tue 10:30", "Wed 10:59", "Sat 10:00"],
     ["Thu 10:30", "Sun 10:30"]),
    ("Sat-Mon 10:00-11:00", ["Sat 10:00", "Sun 10:00", "Mon 10:00"], ["Tue 10:00"]),
])
def test_windows_by_day_and_past_midnight(window: str, inside: list[str],
                                          outside: list[str]) -> None:
    parsed = parse_window(window)
    assert [parsed.contains(_at(t)) for t in inside] == [True] * len(inside)
    assert [parsed.contains(_at(t)) for t in outside] == [False] * len(outside)
    assert parse_window(parsed.text()) == parsed   # what status lines print reads back


def _at(text: str, zone: str = "UTC") -> dt.datetime:
    """A moment in the week of Monday 2026-11-30, as `Sat 01:59`."""
    day, clock = text.split(" ")
    hours, minutes = (int(x) for x in clock.split(":"))
    days = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"].index(day)
    return dt.datetime(2026, 11, 30, hours, minutes, tzinfo=ZoneInfo(zone)) + \
        dt.timedelta(days=days)


@pytest.mark.parametrize(("window", "now", "opens"), [
    ("02:00-04:00", "Mon 12:00", "Tue 02:00 UTC"),
    ("02:00-04:00", "Mon 01:00", "02:00 UTC"),
    ("Sat,Sun 01:00-05:00", "Mon 12:00", "Sat 01:00 UTC"),
    ("Sat,Sun 01:00-05:00", "Sun 06:00", "Sat 01:00 UTC"),
])
def test_a_closed_window_says_when_it_opens(window: str, now: str, opens: str) -> None:
    reason = closed(parse_window(window), "apply", _at(now))
    assert reason == f"outside the apply window {window} until {opens}"
    assert closed(None, "apply", _at(now)) is None


def test_the_time_zone_decides_the_local_time() -> None:
    """One moment, 01:30 UTC: inside 02:00-03:00 in Madrid (CET, UTC+1), not in UTC."""
    window = parse_window("02:00-03:00")
    moment = _at("Mon 01:30")
    assert not window.contains(moment)
    assert window.contains(moment.astimezone(ZoneInfo("Europe/Madrid")))
    config = parse_update_config({"time_zone": "Europe/Madrid", "apply_window": "02:00-03:00"},
                                 "u.yaml")
    assert config.now().utcoffset() == ZoneInfo("Europe/Madrid").utcoffset(config.now())
