"""update.yaml's windows on the simulated device, with the shipped zip application, real
ostree and gpg: outside the download window not a byte of the delta crosses the link;
inside it but outside the apply window the delta is downloaded and nothing is staged, and
the run inside the apply window stages it without fetching it again. Either each window is
placed around (or away from) the current UTC time, `time_zone: UTC`, or the windows stay
and the device's clock moves (libfaketime's `faketime`, UpdateOptions.clock).

Integration tier (root: the simulated device makes a network namespace)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from builder.device.commits import UpdatePair
from builder.device.updater_run import UpdateOptions, run_updater
from builder.publish.offline import INDEX, offline_name
from tests.device.site import SIM, booted_device, sign_index, site, status, updates
from tests.support import requires
from tests.support.windows import CLOSED, OPEN

pytestmark = [pytest.mark.integration,
              requires.root_only("booting the simulated device makes a network namespace"),
              pytest.mark.usefixtures("deletable_sysroots")]


def _config(**windows: str) -> dict[str, object]:
    return {**SIM, "time_zone": "UTC", **windows}


def test_outside_the_download_window_no_byte_of_the_delta_is_fetched(
        pair: UpdatePair, tmp_path: Path) -> None:
    device = booted_device(pair, tmp_path)
    report, deployment = run_updater(device, pair.repo, UpdateOptions(
        config=_config(download_window=CLOSED)))
    assert report.state == "held" and deployment.checksum == pair.v1
    assert report.bytes_on_wire == report.metadata_bytes    # the index and its statement
    assert len(device.deployments()) == 1
    # It opens in 3 hours: today, or after midnight (then the line names the day).
    assert re.match(rf"held: outside the download window {CLOSED} until "
                    rf"((Mon|Tue|Wed|Thu|Fri|Sat|Sun) )?{CLOSED[:5]} UTC \(since ",
                    status(device)), status(device)


def test_downloaded_at_night_staged_in_the_apply_window_without_fetching_it_again(
        pair: UpdatePair, tmp_path: Path) -> None:
    device = booted_device(pair, tmp_path)
    delta = (updates(pair.repo) / offline_name(pair.v1, pair.v2)).stat().st_size
    first, deployment = run_updater(device, pair.repo, UpdateOptions(
        config=_config(download_window=OPEN, apply_window=CLOSED)))
    assert first.state == "held" and deployment.checksum == pair.v1
    assert first.bytes_on_wire == delta + first.metadata_bytes
    assert len(device.deployments()) == 1
    assert status(device).startswith(f"held: outside the apply window {CLOSED} until ")
    staging = device.stateroot_var / "lib/microshift-update/staging"
    assert (staging / offline_name(pair.v1, pair.v2)).stat().st_size == delta
    second, deployment = run_updater(device, pair.repo, UpdateOptions(
        config=_config(download_window=CLOSED, apply_window=OPEN)))
    assert second.method == "delta-file" and deployment.checksum == pair.v2
    assert second.bytes_on_wire == second.metadata_bytes    # the delta was not sent again
    assert [d.checksum for d in device.deployments()] == [pair.v2, pair.v1]
    assert not any(staging.glob("*"))


def test_on_a_controlled_clock_a_device_downloads_at_noon_and_stages_at_3_next_night(
        pair: UpdatePair, tmp_path: Path) -> None:
    """The same update.yaml both times; only the device's clock moves (libfaketime), as a
    device's does between its timer's runs."""
    requires.need_tools("faketime")
    repo = site(pair, tmp_path)
    sign_index(pair, updates(repo) / INDEX, validity=4 * 86400)
    device = booted_device(pair, tmp_path)
    midnight = (int(time.time()) // 86400 + 1) * 86400       # the coming one, UTC
    config = _config(apply_window="02:00-04:00")
    first, deployment = run_updater(device, repo, UpdateOptions(
        config=config, clock=midnight + 12 * 3600))
    assert first.state == "held" and deployment.checksum == pair.v1
    assert first.bytes_on_wire > first.metadata_bytes          # the delta came at noon
    until = time.strftime("%a 02:00", time.gmtime(midnight + 86400))
    assert status(device).startswith(f"held: outside the apply window 02:00-04:00 until "
                                     f"{until} UTC"), status(device)
    second, deployment = run_updater(device, repo, UpdateOptions(
        config=config, clock=midnight + 86400 + 3 * 3600))
    assert second.method == "delta-file" and deployment.checksum == pair.v2
    assert second.bytes_on_wire == second.metadata_bytes      # not fetched again


def test_a_staged_update_reboots_only_inside_the_applywindow(pair: UpdatePair,
                                                               tmp_path: Path) -> None:
    device = booted_device(pair, tmp_path)
    report, _ = run_updater(device, pair.repo, UpdateOptions(
        config=_config(reboot=True, apply_window=OPEN, maintenance_window=CLOSED)))
    log = " ".join(report.log)
    assert report.state == "staged" and "rebooting into the staged deployment" not in log
    assert f"the reboot waits: outside the maintenance window {CLOSED}" in log
