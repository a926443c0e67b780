"""What greenboot's hooks note of a staged rollout update, and the verdict it becomes
(builder/updater/outcome.py): each failed boot of the new release once, with the check that
failed; green on the new release; rolled back once another deployment boots and the new one
is no longer staged, even when that fallback boot is unhealthy too."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from builder.updater.outcome import BOOT_ID, FAILURE_LOG, Outcome, OutcomeFile, note, settled
from builder.updater.state import DamagedState

OLD, NEW = "1" * 64, "2" * 64


def _outcome() -> Outcome:
    return Outcome("edge", "fleet-a", 1, NEW, "2.0", OLD, "1.0")


def _boot(root: Path, boot: str, failure: str | None = None) -> None:
    (root / BOOT_ID).parent.mkdir(parents=True, exist_ok=True)
    (root / BOOT_ID).write_text(boot + "\n")
    log = root / FAILURE_LOG
    log.parent.mkdir(parents=True, exist_ok=True)
    if failure is None:
        log.unlink(missing_ok=True)
    else:
        log.write_text(f"\n{failure}\nmore detail\n")


def test_three_red_boots_then_the_fallback_is_a_rollback_with_the_check(tmp_path: Path) -> None:
    outcome = _outcome()
    for number in (1, 2, 3):
        _boot(tmp_path, f"boot-{number}", f"timed out after {number}s waiting for: the API")
        assert note(outcome, "red", tmp_path, booted=NEW, pending=None)
        assert not note(outcome, "red", tmp_path, booted=NEW, pending=None)   # same boot
    _boot(tmp_path, "boot-4")
    # The fallback boot of the old release is itself unhealthy: red.d still ends the story.
    assert note(outcome, "red", tmp_path, booted=OLD, pending=None)
    assert outcome.verdict == "rolled-back"
    payload = outcome.payload(settled(outcome, OLD, None) or "", "m1")
    assert (payload["event"], payload["boots"]) == ("rolled-back", 3)
    assert payload["failed_check"] == "timed out after 3s waiting for: the API"
    assert (payload["from_commit"], payload["version"], payload["wave"]) == (OLD, "2.0", 1)
    # The last lines of the failure log go with it, for the admin's console.
    assert payload["failed_log"] == "timed out after 3s waiting for: the API\nmore detail"


def test_the_failure_logs_last_lines_are_kept_short_and_printable(tmp_path: Path) -> None:
    outcome = _outcome()
    _boot(tmp_path, "boot-1", "timed out after 2s waiting for: the API")
    lines = [f"line {n} \x1b[31mred\x1b[0m " + "x" * 300 for n in range(40)]
    (tmp_path / FAILURE_LOG).write_text("timed out\n" + "\n".join(lines) + "\n")
    assert note(outcome, "red", tmp_path, booted=NEW, pending=None)
    log = outcome.payload("rolled-back", "m1")["failed_log"].split("\n")
    assert len(log) == 10 and log[0].startswith("line 30 ") and log[-1].startswith("line 39 ")
    assert all(len(line) == 200 and line.isprintable() and "\x1b" not in line for line in log)


def test_a_green_boot_after_a_red_one_counts_both(tmp_path: Path) -> None:
    outcome = _outcome()
    _boot(tmp_path, "boot-1")
    assert note(outcome, "red", tmp_path, booted=NEW, pending=None)
    _boot(tmp_path, "boot-2")
    assert note(outcome, "green", tmp_path, booted=NEW, pending=None)
    payload = outcome.payload("green", "m1")
    assert (payload["boots"], payload["failed_check"]) == (2, "unknown")
    assert not note(outcome, "red", tmp_path, booted=NEW, pending=None)   # judged already


def test_before_the_new_release_boots_nothing_is_decided(tmp_path: Path) -> None:
    outcome = _outcome()
    _boot(tmp_path, "boot-0")
    assert not note(outcome, "green", tmp_path, booted=OLD, pending=NEW)   # staged, waiting
    assert settled(outcome, booted=OLD, pending=NEW) is None
    assert settled(outcome, booted=OLD, pending=None) == "rolled-back"   # no hook ran


def test_a_damaged_outcome_file_is_refused_not_taken_for_none(tmp_path: Path) -> None:
    """No outcome means nothing of a rollout is staged: a damaged file must not say so."""
    file = OutcomeFile(tmp_path)
    assert file.read() is None
    file.write(_outcome())
    assert file.read() == _outcome()
    assert not list(tmp_path.glob("*.new"))  # written whole, then renamed
    for damage in ("{not json", '{"ref": 7}', ""):
        file.path.write_text(damage)
        with pytest.raises(DamagedState, match=r"outcome\.json is damaged"):
            file.read()
    file.remove()
    assert not file.path.exists()


HOOKS = Path(__file__).resolve().parents[2] / "specs/sources/microshift-update/usr/lib/greenboot"


def test_greenboot_s_hooks_start_the_updater_only_for_a_staged_rollout_update(
        tmp_path: Path) -> None:
    updater = tmp_path / "usr/bin/microshift-update"
    updater.parent.mkdir(parents=True)
    calls = tmp_path / "calls"
    updater.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    updater.chmod(0o755)
    env = {"MICROSHIFT_ROOT": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for kind in ("red", "green"):
        hook = HOOKS / f"{kind}.d/50-microshift-update-note.sh"
        assert subprocess.run(["bash", str(hook)], env=env, check=False).returncode == 0
    assert not calls.exists()           # no outcome: no Python started on the boot's path
    OutcomeFile(tmp_path / "var/lib/microshift-update").write(_outcome())
    for kind in ("red", "green"):
        hook = HOOKS / f"{kind}.d/50-microshift-update-note.sh"
        assert subprocess.run(["bash", str(hook)], env=env, check=False).returncode == 0
    assert calls.read_text().splitlines() == [f"--root {tmp_path} note red",
                                              f"--root {tmp_path} note green"]
