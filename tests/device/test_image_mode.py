"""Image mode on the simulated device: the SAMPLE bootc stand-in (builder/device/standins/bootc)
on the real ostree, and the shipped updater's image-mode path (builder/updater/image_run.py):
a good update travels as a tar-diff delta, is rebuilt into layers whose digests are the
signed image's, handed to bootc as an OCI layout, staged and booted; a tampered delta and an
image outside the policy are refused in one line with the device on its commit.

Integration tier: real ostree, zstd, gpg; the device boots in a network namespace (root)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from builder.bootc import tardiff
from builder.bootc.oci import Layout
from builder.bootc.sample_images import (
    IMAGE_REF,
    SAMPLE_REFERENCE,
    SampleImages,
    publish_index,
)
from builder.core.runner import Runner
from builder.core.signing import ensure_sample_key, stop_agent
from builder.device.boot import boot
from builder.device.commits import UpdatePair, sample_version
from builder.device.health_server import ApiServer
from builder.device.image_mode import bootc_status
from builder.device.sysroot import Device
from builder.device.updater_run import UpdateFailed, UpdateOptions, run_updater
from builder.publish.image_updates import ImageRelease, pack_layout
from tests.device.image_site import CONFIG, image_device, site, trust
from tests.device.site import status
from tests.device.test_scenarios import make_ctx
from tests.support import requires

pytestmark = [pytest.mark.integration,
              requires.root_only("booting the simulated device makes a network namespace"),
              pytest.mark.usefixtures("deletable_sysroots")]


def test_the_stand_in_switches_to_an_image_and_it_boots(
        pair: UpdatePair, images: SampleImages, tmp_path: Path) -> None:
    device = image_device(pair, images, tmp_path)
    status = bootc_status(device)
    booted = status["status"]["booted"]
    assert booted["image"]["imageDigest"] == images.v1
    assert booted["image"]["image"] == {"image": str(images.single("v1")), "transport": "oci"}
    assert status["status"]["staged"] is None
    # As bootc's: greenboot's fallback check calls `bootc rollback` only on a bootcHost.
    assert status["status"]["type"] == "bootcHost"
    assert device.deployments()[0].checksum == booted["ostree"]["checksum"]
    assert (device.deployments()[0].path / "usr/etc/greenboot/greenboot.conf").is_file()


def test_an_image_update_travels_as_a_delta_is_staged_and_boots(
        pair: UpdatePair, images: SampleImages, tmp_path: Path) -> None:
    device = image_device(pair, images, tmp_path)
    trust(device, images)
    before = device.deployments()[0]
    report, deployment = run_updater(device, site(images, tmp_path),
                                     UpdateOptions(config=CONFIG))
    delta = images.delta_file.stat().st_size
    assert report.method == "image-delta" and report.delta_bytes == delta
    assert report.bytes_on_wire == delta + report.metadata_bytes
    staged = bootc_status(device)["status"]["staged"]
    assert staged is not None and deployment.id != before.id
    digests = json.loads((device.stateroot_var / "lib/microshift-update/image-digests.json")
                         .read_text())
    assert digests[staged["image"]["imageDigest"]] == images.v2
    with ApiServer() as api:
        assert boot(device, api, {}).healthy
    booted = bootc_status(device)["status"]["booted"]
    assert booted["image"]["imageDigest"] == staged["image"]["imageDigest"]
    assert booted["image"]["version"].endswith("sample.2")
    assert not any((device.stateroot_var / "lib/microshift-update/staging").glob("*"))
    print(f"image update: {report.bytes_on_wire} bytes on the wire ({delta} delta file, "
          f"{report.metadata_bytes} metadata); the changed layers are "
          f"{images.changed_layer_bytes} bytes")


def _refused(device: Device, repo: Path, words: str) -> str:
    before = [d.id for d in device.deployments()]
    with pytest.raises(UpdateFailed) as caught:
        run_updater(device, repo, UpdateOptions(config=CONFIG))
    assert words in str(caught.value)
    assert [d.id for d in device.deployments()] == before
    assert bootc_status(device)["status"]["staged"] is None
    line = status(device)
    assert line.startswith("failed: ") and words in line and "\n" not in line
    return line


def test_a_delta_rebuilding_a_layer_with_another_digest_is_refused_before_staging(
        pair: UpdatePair, images: SampleImages, tmp_path: Path) -> None:
    device = image_device(pair, images, tmp_path)
    trust(device, images)
    repo = site(images, tmp_path)
    updates = repo.parent / "updates" / IMAGE_REF
    forged = tmp_path / "forged"
    with tarfile.open(images.delta_file) as tar:
        tar.extractall(forged)
    layout = Layout(forged)
    [entry] = layout.index()["manifests"]
    manifest = layout.read_json(entry["digest"])
    layer = next(e for e in manifest["layers"] if e["mediaType"] == tardiff.MEDIA_TYPE)
    other, _ = tardiff.make(b"\0" * 10240, tardiff.index_sources(forged), Runner())
    blob = layout.put(other)
    layer.update(digest=blob.digest, size=blob.size)
    replaced = layout.put_json(manifest)
    (forged / "index.json").unlink()
    layout.write_index([{**entry, "digest": replaced.digest, "size": replaced.size}])
    delta_file = updates / images.delta_file.name
    pack_layout(forged, delta_file)
    ctx = make_ctx(images.public_key.parent.parent)
    key = ensure_sample_key(ctx.runner, ctx.progress, images.public_key.parent,
                            ctx.release.source_date_epoch)
    try:
        release = ImageRelease(IMAGE_REF, SAMPLE_REFERENCE, images.v2,
                               sample_version(ctx, 2), None, None)
        publish_index(ctx, key, updates, release, images.v1, delta_file=delta_file)
    finally:
        stop_agent(ctx.runner, key.homedir)
    _refused(device, repo, "rebuilds a layer with diff_id sha256:")


def test_an_image_outside_the_policy_is_refused(pair: UpdatePair, images: SampleImages,
                                                tmp_path: Path) -> None:
    device = image_device(pair, images, tmp_path)
    trust(device, images, scope="registry.sample/someone-else")
    line = _refused(device, site(images, tmp_path), "is outside the policy")
    assert SAMPLE_REFERENCE in line
