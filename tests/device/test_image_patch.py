"""An image update that patches a binary (the SAMPLE pair with `patched=True`: v2's 256 KiB
payload is v1's with 16 changes of 64 bytes) on the simulated image-mode device: the device
downloads the tar-diff delta, a small part of the changed layers a pull would fetch, and
rebuilds them byte for byte (docs/benchmarks.md, "Image mode: a patched binary").

Integration tier: real ostree, zstd, gpg; the device boots in a network namespace (root)."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.bootc.sample_images import SampleImages, build_sample_images
from builder.device.commits import UpdatePair, build_sample_pair, sample_version
from builder.device.image_mode import bootc_status
from builder.device.updater_run import UpdateOptions, run_updater
from builder.publish.offline import offline_name
from tests.device.image_site import CONFIG, image_device, site, trust
from tests.device.test_scenarios import make_ctx
from tests.support import requires

pytestmark = [pytest.mark.integration,
              requires.root_only("booting the simulated device makes a network namespace"),
              pytest.mark.usefixtures("deletable_sysroots")]

PAYLOAD = 256 * 1024


@pytest.fixture(scope="module")
def patched(tmp_path_factory: pytest.TempPathFactory) -> tuple[UpdatePair, SampleImages]:
    requires.need_tools("zstd")
    build = tmp_path_factory.mktemp("patched")
    ctx = make_ctx(build)
    pair = build_sample_pair(ctx, build / "server/repo", PAYLOAD, patched=True)
    images = build_sample_images(ctx, pair.repo, (pair.v1, pair.v2),
                                 (sample_version(ctx, 1), sample_version(ctx, 2)),
                                 build / "images")
    return pair, images


def test_a_patched_binary_travels_as_a_fraction_of_its_changed_layers(
        patched: tuple[UpdatePair, SampleImages], tmp_path: Path) -> None:
    pair, images = patched
    device = image_device(pair, images, tmp_path)
    trust(device, images)
    report, _ = run_updater(device, site(images, tmp_path), UpdateOptions(config=CONFIG))
    delta = images.delta_file.stat().st_size
    assert report.method == "image-delta" and report.delta_bytes == delta
    assert report.bytes_on_wire == delta + report.metadata_bytes
    assert bootc_status(device)["status"]["staged"] is not None
    assert delta <= 0.2 * images.changed_layer_bytes
    static = (pair.repo.parent / "updates" / pair.ref / offline_name(pair.v1, pair.v2))
    tardiffs = sum(layer["tar_diff_bytes"] for layer in images.delta_report["layers"])
    print(f"patched binary: {report.bytes_on_wire} bytes on the wire ({delta} oci-delta "
          f"file, {tardiffs} of it tar-diffs, {report.metadata_bytes} metadata); changed "
          f"layers {images.changed_layer_bytes}; ostree delta file "
          f"{static.stat().st_size}; {report.seconds:.1f}s")
