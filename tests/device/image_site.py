"""The image-mode device and the site it updates from (tests/device/test_image_mode.py,
test_image_rollback.py): the SAMPLE bootc stand-in run as the device's scripts run it, a
device switched to image v1 and booted, the published updates/ and the device's policy."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from builder.bootc.sample_images import IMAGE_REF, SAMPLE_REFERENCE, SampleImages
from builder.device import image_mode
from builder.device.boot import boot
from builder.device.commits import UpdatePair
from builder.device.health_server import ApiServer
from builder.device.sysroot import Device
from tests.device.site import SIM, booted_device

CONFIG = {**SIM, "mode": "image", "image_ref": IMAGE_REF}


def image_device(pair: UpdatePair, images: SampleImages, tmp_path: Path) -> Device:
    """A device running image v1: installed from the ostree commit, switched to the image
    with the stand-in and booted."""
    device = booted_device(pair, tmp_path)
    image_mode.switch(device, images.single("v1"))
    with ApiServer() as api:
        assert boot(device, api, {}).healthy
    return device


def site(images: SampleImages, tmp_path: Path) -> Path:
    """A copy of the published updates/ (which a test may tamper with) beside an empty
    repository: an image-mode device reads none."""
    updates = images.updates
    for _ in IMAGE_REF.split("/"):
        updates = updates.parent
    shutil.copytree(updates, tmp_path / "site/updates")
    subprocess.run(["ostree", f"--repo={tmp_path / 'site/repo'}", "init", "--mode=archive"],
                   check=True)
    return tmp_path / "site/repo"


def trust(device: Device, images: SampleImages, scope: str = SAMPLE_REFERENCE,
          key: Path | None = None) -> None:
    """The release's policy and key (default: the sample images') in the device's /etc, as
    DIR/bootc/device/ ships them."""
    image_mode.trust(device, key or images.public_key, scope)
