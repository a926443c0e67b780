"""/etc/microshift/update.yaml: the device's reader (builder/updater/update_config.py, Python 3.9
and PyYAML) and the model the JSON Schema comes from (builder/updater/update_model.py) accept and
refuse the same documents; a bad value is one line naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
from tests.support.cli import PROJECT_ROOT
from tests.support.mutations import check_schema_agrees, mutated, schema_validator

SHIPPED = PROJECT_ROOT / "specs/sources/microshift-update/etc/microshift/update.yaml"
FULL = {"remote": "edge", "updates_url": "https://updates.example.com/edge/updates/",
        "max_bytes_per_second": 625000, "staging_max_bytes": 2 * 1024 ** 3, "retries": 3,
        "retry_delay_seconds": 10, "timeout_seconds": 30, "reboot": True,
        "maintenance_window": "23:30-02:00", "allow_downgrade": False,
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
     "maintenance_window: '25:00-01:00' is not allowed; allowed: HH:MM-HH:MM (24-hour local "
     "time, e.g. 02:00-04:30; may wrap past midnight)"),
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
    ("02:00-04:00", ["02:00", "03:59"], ["04:00", "01:59", "12:00"]),
    ("23:30-01:00", ["23:30", "00:00", "00:59"], ["01:00", "23:29", "12:00"]),
])
def test_maintenance_windows_wrap_past_midnight(window: str, inside: list[str],
                                                outside: list[str]) -> None:
    parsed = parse_window(window)

    def minute(text: str) -> int:
        return int(text[:2]) * 60 + int(text[3:])

    assert [parsed.contains(minute(t)) for t in inside] == [True] * len(inside)
    assert [parsed.contains(minute(t)) for t in outside] == [False] * len(outside)
    assert parsed.text() == window
