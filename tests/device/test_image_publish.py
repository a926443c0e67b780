"""`publish` of a release with a pushed bootc image: beside the ostree updates it writes the
image-mode index (signed with the release key, its statement signed with the others'), and
the bootc stage's delta as one oci-delta file; a device on image v1 updates from the
published site alone. Without the key, or for an image never pushed, no index is written.

Integration tier: real ostree, rsync, zstd, gpg; the device boots in a network namespace."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from builder.bootc.sample_images import IMAGE_REF, SAMPLE_REFERENCE, SampleImages
from builder.context import Context
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.core.signing import ensure_sample_key
from builder.device.commits import SAMPLE_REF, UpdatePair
from builder.device.image_mode import bootc_status
from builder.device.updater_run import UpdateOptions, run_updater
from builder.publish.image_updates import delta_name
from builder.publish.upload import PublishOptions, publish
from tests.device.image_site import CONFIG, image_device, trust
from tests.device.test_scenarios import make_ctx
from tests.support import requires

pytestmark = [pytest.mark.integration,
              requires.root_only("booting the simulated device makes a network namespace"),
              pytest.mark.usefixtures("deletable_sysroots")]

IMAGE, ARCH = "device-sim", "x86_64"


def release_build(pair: UpdatePair, images: SampleImages, build: Path) -> Context:
    """A build directory as `build-image --push` leaves it: the ostree repo with the
    commits, and the bootc stage's layout, delta and report with where it was pushed."""
    ctx = make_ctx(build)
    shutil.copytree(pair.repo, ctx.layout.ostree_repo, symlinks=True)
    shutil.copytree(images.layout, ctx.layout.bootc_layout(IMAGE))
    shutil.copytree(images.layout.parent / "delta", ctx.layout.bootc_delta(IMAGE, ARCH))
    report = {"image": IMAGE, "arch": ARCH, "ref": SAMPLE_REF, "commit": pair.v2,
              "manifest": images.v2,
              "update": {"from_manifest": images.v1, "delta": {
                  "from_manifest": images.v1, "to_manifest": images.v2}},
              "pushed": {"reference": SAMPLE_REFERENCE, "digest": images.v2}}
    ctx.layout.bootc_report(IMAGE, ARCH).write_text(json.dumps(report))
    # Another image of the build, built but never pushed: no registry reference to name.
    unpushed = {**report, "image": "not-pushed", "ref": "sample/other/x86_64/edge"}
    del unpushed["pushed"]
    ctx.layout.bootc_report("not-pushed", ARCH).write_text(json.dumps(unpushed))
    return ctx


def test_publish_writes_the_image_index_and_delta_and_an_image_device_updates_from_it(
        pair: UpdatePair, images: SampleImages, tmp_path: Path) -> None:
    assert pair.public_key is not None
    ctx = release_build(pair, images, tmp_path / "build")
    site = tmp_path / "site"
    publish(ctx, PublishOptions(str(site)))
    assert not (site / "updates" / IMAGE_REF).exists()   # no key: nothing devices take
    key = ensure_sample_key(Runner(), Progress(), pair.public_key.parent, 0)
    publish(ctx, PublishOptions(str(site), key=key))
    published = site / "updates" / IMAGE_REF
    names = sorted(p.name for p in published.iterdir())
    delta = delta_name(images.v1, images.v2)
    assert names == sorted([delta, "index.json", "index.json.sig", "timestamp.json",
                            "timestamp.json.sig"])
    # The same delta layout packs into the same bytes the sample published.
    assert (published / delta).read_bytes() == images.delta_file.read_bytes()
    index = json.loads((published / "index.json").read_text())
    assert (index["ref"], index["to_commit"], index["image"]["reference"]) == \
        (IMAGE_REF, images.v2[len("sha256:"):], SAMPLE_REFERENCE)
    assert index["to_version"].endswith("sample.2")
    assert not (site / "updates/sample/other").exists()
    device = image_device(pair, images, tmp_path / "device")
    trust(device, images, key=pair.public_key)
    report, _ = run_updater(device, site / "repo", UpdateOptions(config=CONFIG))
    assert report.method == "image-delta" and report.delta_bytes == images.delta_file.stat().st_size
    staged = bootc_status(device)["status"]["staged"]
    digests = json.loads((device.stateroot_var / "lib/microshift-update/image-digests.json")
                         .read_text())
    assert digests[staged["image"]["imageDigest"]] == images.v2
