"""The image-mode device and the site it updates from (tests/device/test_image_mode.py,
test_image_rollback.py): the SAMPLE bootc stand-in run as the device's scripts run it, a
device switched to image v1 and booted, the published updates/ and the device's policy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from builder.bootc.sample_images import IMAGE_REF, SAMPLE_REFERENCE, SampleImages
from builder.device.boot import boot, script_env
from builder.device.commits import UpdatePair
from builder.device.health_server import ApiServer
from builder.device.sysroot import Device
from tests.device.site import SIM, booted_device

POLICY_KEY = "etc/pki/containers/microshift-release.gpg"
CONFIG = {**SIM, "mode": "image", "image_ref": IMAGE_REF}


def bootc(device: Device, *args: str) -> subprocess.CompletedProcess[str]:
    root = device.state_dir / "root"
    env = {**os.environ, **script_env(device, root)}
    return subprocess.run(["bootc", *args], env=env, capture_output=True, text=True,
                          check=False)


def bootc_status(device: Device) -> dict[str, Any]:
    proc = bootc(device, "status", "--json")
    assert proc.returncode == 0, proc.stderr
    status: dict[str, Any] = json.loads(proc.stdout)
    return status


def image_device(pair: UpdatePair, images: SampleImages, tmp_path: Path) -> Device:
    """A device running image v1: installed from the ostree commit, switched to the image
    with the stand-in and booted."""
    device = booted_device(pair, tmp_path)
    proc = bootc(device, "switch", "--transport", "oci", str(images.single("v1")))
    assert proc.returncode == 0, proc.stderr
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
    root = device.state_dir / "root"
    (root / POLICY_KEY).parent.mkdir(parents=True, exist_ok=True)
    (root / POLICY_KEY).write_bytes((key or images.public_key).read_bytes())
    etc = root / "etc"
    policy = {"default": [{"type": "reject"}], "transports": {"docker": {scope: [
        {"type": "signedBy", "keyType": "GPGKeys", "keyPath": "/" + POLICY_KEY}]}}}
    (etc / "containers").mkdir(exist_ok=True)
    (etc / "containers/policy.json").write_text(json.dumps(policy))
