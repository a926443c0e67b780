"""Image mode on the simulated device: the SAMPLE bootc stand-in (builder/device/standins/bootc)
on the real ostree, and the shipped updater's image-mode path (builder/updater/image_run.py):
a good update travels as a tar-diff delta, is rebuilt into layers whose digests are the
signed image's, handed to bootc as an OCI layout, staged and booted; a tampered delta and an
image outside the policy are refused in one line with the device on its commit.

Integration tier: real ostree, zstd, gpg; the device boots in a network namespace (root)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from builder.bootc.sample_images import SampleImages, build_sample_images
from builder.device.boot import boot, script_env
from builder.device.commits import UpdatePair, sample_version
from builder.device.health_server import ApiServer
from builder.device.sysroot import Device
from tests.device.site import booted_device
from tests.device.test_scenarios import make_ctx
from tests.support import requires

pytestmark = [pytest.mark.integration,
              requires.root_only("booting the simulated device makes a network namespace"),
              pytest.mark.usefixtures("deletable_sysroots")]


@pytest.fixture(scope="module")
def images(pair: UpdatePair, tmp_path_factory: pytest.TempPathFactory) -> SampleImages:
    requires.need_tools("zstd")
    build = tmp_path_factory.mktemp("images")
    ctx = make_ctx(build)
    return build_sample_images(ctx, pair.repo, (pair.v1, pair.v2),
                               (sample_version(ctx, 1), sample_version(ctx, 2)), build / "out")


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


def test_the_stand_in_switches_to_an_image_and_it_boots(
        pair: UpdatePair, images: SampleImages, tmp_path: Path) -> None:
    device = image_device(pair, images, tmp_path)
    status = bootc_status(device)
    booted = status["status"]["booted"]
    assert booted["image"]["imageDigest"] == images.v1
    assert booted["image"]["image"] == {"image": str(images.single("v1")), "transport": "oci"}
    assert status["status"]["staged"] is None
    assert device.deployments()[0].checksum == booted["ostree"]["checksum"]
    assert (device.deployments()[0].path / "usr/etc/greenboot/greenboot.conf").is_file()
