"""An image-mode update over a link that drops (the ostree path's lte-update and cut-run
tests, for the oci-delta file): every cut resumes from the last byte the device has, no byte
of the delta crosses the link twice, and a run that gives up leaves its part for the next
run to finish.

Integration tier: real ostree, zstd, gpg; the device boots in a network namespace (root)."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.bootc.sample_images import SampleImages
from builder.device.commits import UpdatePair
from builder.device.image_mode import bootc_status
from builder.device.updater_run import UpdateFailed, UpdateOptions, run_updater
from tests.device.image_site import CONFIG, image_device, site, trust
from tests.device.site import status
from tests.support import requires

pytestmark = [pytest.mark.integration,
              requires.root_only("booting the simulated device makes a network namespace"),
              pytest.mark.usefixtures("deletable_sysroots")]


def staged_image(device_status: dict[str, object]) -> bool:
    host = device_status["status"]
    return isinstance(host, dict) and host.get("staged") is not None


def test_an_image_delta_cut_five_times_resumes_each_cut_and_sends_no_byte_twice(
        pair: UpdatePair, images: SampleImages, tmp_path: Path) -> None:
    device = image_device(pair, images, tmp_path)
    trust(device, images)
    report, _ = run_updater(device, site(images, tmp_path),
                            UpdateOptions(interruptions=5, seed=11, config=CONFIG))
    delta = images.delta_file.stat().st_size
    assert report.method == "image-delta" and report.delta_bytes == delta
    assert report.interruptions == 5 == report.resumed
    assert report.duplicate_delta_bytes == 0
    assert report.bytes_on_wire - report.metadata_bytes == delta
    assert staged_image(bootc_status(device))


def test_a_cut_image_run_leaves_the_part_and_the_next_run_resumes_it(
        pair: UpdatePair, images: SampleImages, tmp_path: Path) -> None:
    device = image_device(pair, images, tmp_path)
    trust(device, images)
    repo = site(images, tmp_path)
    before = [d.id for d in device.deployments()]
    with pytest.raises(UpdateFailed) as caught:
        run_updater(device, repo, UpdateOptions(interruptions=1, seed=7,
                                                config={**CONFIG, "retries": 0}))
    first = caught.value.report
    assert first.interruptions == 1 and [d.id for d in device.deployments()] == before
    assert status(device).startswith("failed: download of ")
    assert not staged_image(bootc_status(device))
    report, _ = run_updater(device, repo, UpdateOptions(config=CONFIG))
    assert report.method == "image-delta" and staged_image(bootc_status(device))
    delta = report.delta_bytes or 0
    had = delta - (report.bytes_on_wire - report.metadata_bytes)
    assert 0 < had < delta   # the second run fetched only what the first had not
    assert first.bytes_on_wire - first.metadata_bytes == had
    assert report.duplicate_delta_bytes == 0
