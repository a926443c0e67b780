"""Image mode without a delta: when the signed index offers none from the booted image, the
updater (builder/updater/image_pull.py) pulls the signed manifest and only the layers the
device lacks from the registry, as bootc does, and stages them; a registry serving other
bytes than the signed image's is refused with the device on its image.

Integration tier: Debian's docker-registry (distribution) on loopback, skopeo, real ostree,
gpg; the device boots in a network namespace (root)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.bootc.registry import LocalRegistry
from builder.bootc.sample_images import IMAGE_REF, SAMPLE_REFERENCE, SampleImages, publish_index
from builder.core.runner import Runner
from builder.core.signing import ensure_sample_key, stop_agent
from builder.device.boot import boot
from builder.device.commits import UpdatePair, sample_version
from builder.device.health_server import ApiServer
from builder.device.image_mode import bootc_status
from builder.device.updater_run import UpdateFailed, UpdateOptions, run_updater
from builder.publish.image_updates import ImageRelease
from tests.device.image_site import CONFIG, image_device, site, trust
from tests.device.site import status
from tests.device.test_scenarios import make_ctx
from tests.support import requires
from tests.support.registry import registry as layout_registry

pytestmark = [pytest.mark.integration,
              requires.root_only("booting the simulated device makes a network namespace"),
              pytest.mark.usefixtures("deletable_sysroots")]
REPOSITORY = "microshift/device-sim"   # SAMPLE_REFERENCE's path in the registry


@pytest.fixture(scope="module")
def pushed(images: SampleImages, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Both images in a real registry on loopback (digests preserved); its URL."""
    requires.need_tools("skopeo")
    storage = tmp_path_factory.mktemp("registry") / "storage"
    with LocalRegistry(storage) as local:
        for name in ("v1", "v2"):
            Runner().run(["skopeo", "copy", "--preserve-digests", "--dest-tls-verify=false",
                          f"oci:{images.single(name)}",
                          f"docker://{local.address}/{REPOSITORY}:{name}"])
        yield f"http://{local.address}"


def no_delta_site(images: SampleImages, tmp_path: Path) -> Path:
    """The published site with the index re-signed without a delta."""
    repo = site(images, tmp_path)
    updates = repo.parent / "updates" / IMAGE_REF
    for delta in updates.glob("*.oci-delta.tar"):
        delta.unlink()
    ctx = make_ctx(images.public_key.parent.parent)
    key = ensure_sample_key(ctx.runner, ctx.progress, images.public_key.parent,
                            ctx.release.source_date_epoch)
    try:
        release = ImageRelease(IMAGE_REF, SAMPLE_REFERENCE, images.v2, sample_version(ctx, 2),
                               None, None)
        publish_index(ctx, key, updates, release, images.v1, delta_file=None)
    finally:
        stop_agent(ctx.runner, key.homedir)
    return repo


def layers(images: SampleImages, name: str) -> list[dict[str, object]]:
    single = images.single(name)
    [entry] = json.loads((single / "index.json").read_text())["manifests"]
    manifest = json.loads((single / "blobs/sha256" / entry["digest"][7:]).read_text())
    found: list[dict[str, object]] = manifest["layers"]
    return found


def test_without_a_delta_only_the_layers_the_device_lacks_are_pulled_and_v2_boots(
        pair: UpdatePair, images: SampleImages, pushed: str, tmp_path: Path) -> None:
    device = image_device(pair, images, tmp_path)
    trust(device, images)
    config = {**CONFIG, "image_registry_url": pushed}
    report, _ = run_updater(device, no_delta_site(images, tmp_path),
                            UpdateOptions(config=config))
    assert report.method == "image-layers" and report.delta_bytes is None
    # What v2 has and v1 lacks, each byte once; the layers v1 shares are not fetched.
    assert report.layer_bytes == images.changed_layer_bytes == report.received
    whole = sum(int(str(layer["size"])) for layer in layers(images, "v2"))
    assert 0 < report.layer_bytes < whole
    staged = bootc_status(device)["status"]["staged"]
    assert staged["image"]["imageDigest"] == images.v2   # the signed manifest itself
    with ApiServer() as api:
        assert boot(device, api, {}).healthy
    booted = bootc_status(device)["status"]["booted"]
    assert booted["image"]["imageDigest"] == images.v2
    assert not any((device.stateroot_var / "lib/microshift-update/staging").glob("*"))
    print(f"image update without a delta: {report.layer_bytes} bytes of layers of {whole}, "
          f"{report.metadata_bytes} metadata")


def tampered(images: SampleImages, tmp_path: Path, what: str) -> Path:
    """v2's layout as a registry serving other bytes would: under v2's manifest digest
    v1's manifest (`manifest`), or a new layer's blob overwritten (`layer`)."""
    layout = tmp_path / "tampered"
    shutil.copytree(images.single("v2"), layout, copy_function=shutil.copyfile)
    blobs = layout / "blobs/sha256"
    if what == "manifest":
        v1 = images.single("v1") / "blobs/sha256" / images.v1[7:]
        (blobs / images.v2[7:]).write_bytes(v1.read_bytes())
    else:
        had = {layer["digest"] for layer in layers(images, "v1")}
        new = next(layer for layer in layers(images, "v2") if layer["digest"] not in had)
        path = blobs / str(new["digest"])[7:]
        path.write_bytes(b"\0" * path.stat().st_size)
    return layout


@pytest.mark.parametrize(("what", "words"), [
    ("manifest", "the registry's answer does not hash to sha256:"),
    ("layer", "the signed manifest says"),
])
def test_a_registry_serving_other_bytes_is_refused_before_staging(
        pair: UpdatePair, images: SampleImages, tmp_path: Path, what: str, words: str) -> None:
    device = image_device(pair, images, tmp_path)
    trust(device, images)
    repo = no_delta_site(images, tmp_path)
    before = [d.id for d in device.deployments()]
    with layout_registry({REPOSITORY: tampered(images, tmp_path, what)}) as address, \
            pytest.raises(UpdateFailed) as caught:
        run_updater(device, repo, UpdateOptions(config={
            **CONFIG, "image_registry_url": f"http://{address}", "retries": 0}))
    assert words in str(caught.value)
    assert [d.id for d in device.deployments()] == before
    assert bootc_status(device)["status"]["staged"] is None
    line = status(device)
    assert line.startswith("failed: ") and words in line and "\n" not in line
