"""Migrating an ostree device to image mode on the simulated device (issue 41, item 5): a
device installed from the ostree commit v1, with MicroShift data and an admin's /etc
changes, switches to the bootc image of the same release with `bootc switch --transport oci`
(the SAMPLE stand-in on the real ostree), boots it green and keeps its data and /etc (ostree
admin deploy's 3-way /etc merge, /var shared by the stateroot); `bootc rollback` and a reboot
return it to the ostree deployment itself, green, data kept; with the updater's image mode
enabled, the migrated device updates to image v2.

Integration tier: real ostree, zstd, gpg, greenboot's scripts; network namespaces (root)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from builder.bootc.sample_images import SampleImages
from builder.device.boot import BootReport, boot
from builder.device.commits import UpdatePair
from builder.device.health_server import ApiServer
from builder.device.image_mode import bootc, bootc_status
from builder.device.sysroot import Deployment, Device
from builder.device.updater_run import UpdateOptions, run_updater
from tests.device.image_site import CONFIG, site, trust
from tests.device.site import booted_device
from tests.support import requires

pytestmark = [pytest.mark.integration,
              requires.root_only("booting the simulated device makes a network namespace"),
              pytest.mark.usefixtures("deletable_sysroots")]

MARKER = "lib/microshift/site-marker"            # under the stateroot's /var
SETTING = "dns:\n  baseDomain: edge-0042.example.net\n"
HOSTNAME = "edge-0042\n"
UNPINNED = "systemd/system/ovs-vswitchd.service.d/microshift-cpuaffinity.conf"


def admin_changes(device: Device) -> None:
    """What a running device has that its commit has not: MicroShift state in /var, a
    changed config file, a new file and a removed one in /etc (through the booted root)."""
    (device.stateroot_var / MARKER).write_text("cluster state of v1\n")
    etc = device.state_dir / "root/etc"
    with (etc / "microshift/config.yaml").open("a") as config:
        config.write(SETTING)
    (etc / "hostname").write_text(HOSTNAME)
    (etc / UNPINNED).unlink()   # the admin drops the release's CPU pinning of OVS


def assert_kept(device: Device, deployment: Deployment) -> None:
    assert (device.stateroot_var / MARKER).read_text() == "cluster state of v1\n"
    config = (deployment.path / "etc/microshift/config.yaml").read_text()
    assert config.endswith(SETTING)
    assert (deployment.path / "etc/hostname").read_text() == HOSTNAME
    assert (deployment.path / "usr/etc" / UNPINNED).is_file()
    assert not (deployment.path / "etc" / UNPINNED).exists()


def health(device: Device) -> dict[str, Any]:
    """greenboot's verdict of the last boot, as green.d / red.d record it."""
    document: dict[str, Any] = json.loads(
        (device.stateroot_var / "lib/microshift-backups/health.json").read_text())
    return document


def reboot(device: Device) -> BootReport:
    with ApiServer() as api:
        report = boot(device, api, {})
    assert report.healthy and not report.rolled_back and not report.reboot
    assert health(device) == {**health(device), "health": "healthy",
                              "deployment_id": report.deployment.id}
    return report


def migrate(pair: UpdatePair, images: SampleImages, tmp_path: Path
            ) -> tuple[Device, Deployment, Deployment]:
    """Install from the ostree commit v1, change /var and /etc, `bootc switch` to image v1
    and reboot: the device, its ostree deployment and its image deployment."""
    device = booted_device(pair, tmp_path)
    [installed] = device.deployments()
    host = bootc_status(device)
    assert host["spec"]["image"] is None and host["status"]["booted"]["image"] is None
    assert host["status"]["booted"]["ostree"]["checksum"] == pair.v1
    admin_changes(device)
    proc = bootc(device, "switch", "--transport", "oci", str(images.single("v1")))
    assert proc.returncode == 0, proc.stderr
    staged = bootc_status(device)["status"]["staged"]
    assert staged["image"]["imageDigest"] == images.v1
    image = reboot(device).deployment
    assert image.id != installed.id
    return device, installed, image


def test_an_ostree_device_switches_to_the_image_of_its_release_keeping_data_and_config(
        pair: UpdatePair, images: SampleImages, tmp_path: Path) -> None:
    device, installed, image = migrate(pair, images, tmp_path)
    host = bootc_status(device)
    booted, rollback = host["status"]["booted"], host["status"]["rollback"]
    assert host["spec"]["image"] == {"image": str(images.single("v1")), "transport": "oci"}
    assert booted["image"]["imageDigest"] == images.v1
    assert booted["image"]["version"] == device.repo.metadata(pair.v1, "version")
    assert booted["ostree"]["checksum"] == image.checksum != pair.v1
    assert rollback["image"] is None and rollback["ostree"]["checksum"] == pair.v1
    assert host["status"]["staged"] is None and not host["status"]["rollbackQueued"]
    assert host["status"]["type"] == "bootcHost"
    assert [d.id for d in device.deployments()] == [image.id, installed.id]
    assert_kept(device, image)
    # The admin's change is merged into the image's /etc, not written into the image.
    assert not (image.path / "usr/etc/microshift/config.yaml").read_text().endswith(SETTING)
    # The first green boot of the image backed up the data of the ostree deployment, so a
    # rollback to it has that deployment's data to restore.
    backup = device.stateroot_var / "lib/microshift-backups" / installed.id
    assert (backup / "site-marker").is_file()


def test_bootc_rollback_returns_a_migrated_device_to_its_ostree_deployment(
        pair: UpdatePair, images: SampleImages, tmp_path: Path) -> None:
    device, installed, image = migrate(pair, images, tmp_path)
    proc = bootc(device, "rollback")
    assert proc.returncode == 0, proc.stderr
    host = bootc_status(device)["status"]
    assert host["rollbackQueued"] and host["rollback"]["ostree"]["checksum"] == pair.v1
    back = reboot(device).deployment
    assert (back.id, back.checksum) == (installed.id, pair.v1)
    host = bootc_status(device)["status"]
    assert host["booted"]["image"] is None and host["booted"]["ostree"]["checksum"] == pair.v1
    assert host["type"] is None   # an ostree deployment booted: greenboot uses rpm-ostree
    assert host["rollback"]["image"]["imageDigest"] == images.v1
    assert host["rollback"]["ostree"]["checksum"] == image.checksum
    assert not host["rollbackQueued"] and host["staged"] is None
    assert device.grubenv.counter() is None
    assert_kept(device, back)


def test_a_migrated_device_updates_to_image_v2_in_image_mode(
        pair: UpdatePair, images: SampleImages, tmp_path: Path) -> None:
    device, installed, image = migrate(pair, images, tmp_path)
    trust(device, images)
    report, staged = run_updater(device, site(images, tmp_path), UpdateOptions(config=CONFIG))
    assert report.method == "image-delta" and report.delta_bytes > 0
    updated = reboot(device).deployment
    assert updated.id == staged.id
    host = bootc_status(device)["status"]
    assert host["booted"]["image"]["version"].endswith("sample.2")
    # ostree keeps the booted and the new deployment: the ostree one is pruned by then,
    # and image v1 is what a rollback returns to.
    assert host["rollback"]["ostree"]["checksum"] == image.checksum
    assert installed.id not in [d.id for d in device.deployments()]
    assert_kept(device, updated)
