"""Embedding images per architecture: each commit's store holds the image of its own
architecture, findable by the digest release.yaml pins (a manifest list's); an image with
no image for the architecture is refused before the store is touched; a store holding
another image than the one resolved is refused. Runs skopeo for real, as root."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from builder.compose.containers import (
    STORE,
    EmbeddedImage,
    embed_images,
    store_reference,
    verify_store,
)
from builder.compose.inputs import ContainerSpec
from builder.core.errors import BuildError, InputError
from builder.core.runner import Runner
from builder.release.model import Image, load_release
from builder.sources.platforms import digest_of
from builder.sources.samples import (
    image_blobs,
    sample_instance_digest,
    write_oci_layout,
    write_single_arch_layout,
)
from tests.support import requires
from tests.support.cli import RELEASE
from tests.support.registry import registry

pytestmark = [
    pytest.mark.integration,
    requires.root_only("containers/storage keeps the embedded images' file ownership"),
]

EPOCH = 1700000000
CORE = load_release(RELEASE).images(("core",))


def embed(root: Path, arch: str, images: tuple[Image, ...] = CORE,
          specs: list[ContainerSpec] | None = None) -> list[EmbeddedImage]:
    return embed_images(Runner(), root / "tree", specs or [ContainerSpec(i.ref, i.ref)
                                                           for i in images],
                        images, arch=arch, epoch=EPOCH, workdir=root / "work")


def inspect(root: Path, name: str, goarch: str) -> dict[str, Any]:
    """What a container runtime of that architecture sees in the tree's store."""
    reference = store_reference(root / "tree" / STORE.lstrip("/"), root / "run", name)
    proc = subprocess.run(["skopeo", "inspect", "--override-arch", goarch, reference],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def snapshot(root: Path) -> dict[str, bytes | str]:
    return {p.relative_to(root).as_posix(): (str(p.readlink()) if p.is_symlink()
                                             else p.read_bytes() if p.is_file() else "dir")
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize(("arch", "goarch"), [("x86_64", "amd64"), ("aarch64", "arm64")])
def test_each_architecture_embeds_its_own_images_findable_by_the_list_digest(
        tmp_path: Path, arch: str, goarch: str) -> None:
    embedded = embed(tmp_path / "one", arch)
    for image in CORE:
        seen = inspect(tmp_path / "one", image.ref, goarch)
        assert (seen["Digest"], seen["Architecture"]) == (image.digest, goarch)
        [record] = [e for e in embedded if e.name == image.ref]
        assert (record.arch, record.list_digest, record.instance_digest) == \
            (arch, image.digest, sample_instance_digest(image.component, image.name, arch))
    embed(tmp_path / "two", arch)
    store = Path("tree") / STORE.lstrip("/")
    assert snapshot(tmp_path / "one" / store) == snapshot(tmp_path / "two" / store)


@pytest.mark.parametrize("layout", ["list without arm64", "amd64 image"])
def test_an_image_without_an_aarch64_image_is_refused_before_anything_is_copied(
        tmp_path: Path, layout: str) -> None:
    dest = tmp_path / "image"
    written = (write_oci_layout(dest, "core", "pause", arches=("x86_64",))
               if layout == "list without arm64"
               else write_single_arch_layout(dest, "core", "pause", "x86_64"))
    # Named to sort last: the sample images before it would be copied first.
    lacking = Image("core", "zz-amd64-only", f"quay.io/microshift-sample/zz@{written.digest}",
                    f"oci:{dest}")
    with pytest.raises(InputError) as refused:
        embed(tmp_path, "aarch64", (*CORE, lacking))
    offered = ("its manifest list offers linux/amd64" if layout == "list without arm64"
               else "its only image is for amd64 (its config says so)")
    assert refused.value.message == (
        f"release.yaml: components.core.images.zz-amd64-only.ref: {lacking.ref}: no image "
        f"for aarch64 (linux/arm64): {offered}")
    assert not (tmp_path / "tree" / "usr").exists()


@pytest.mark.parametrize("damage", ["manifest", "config"])
def test_a_store_holding_another_image_than_resolved_is_refused(tmp_path: Path,
                                                                damage: str) -> None:
    [pause] = [img for img in CORE if img.name == "pause"]
    [embedded] = embed(tmp_path, "aarch64", (pause,))
    store = tmp_path / "tree" / STORE.lstrip("/")
    [record] = json.loads((store / "overlay-images/images.json").read_text())
    _, amd64_config, amd64_manifest = image_blobs("core", "pause", "x86_64")
    if damage == "manifest":
        (store / "overlay-images" / record["id"] / "manifest").write_bytes(amd64_manifest)
        expected = (f"{pause.ref}: the store holds image "
                    f"{sample_instance_digest('core', 'pause', 'x86_64')} for aarch64, "
                    f"expected {embedded.instance_digest} (the aarch64 image of {pause.digest})")
    else:
        [config] = (store / "overlay-images" / record["id"]).glob("=c2hh*")  # "sha256:..."
        config.write_bytes(amd64_config)
        named = base64.b64decode(config.name[1:]).decode()
        expected = (f"{pause.ref}: the store's config {named} holds other bytes (their digest "
                    f"is {digest_of(amd64_config)})")
    with pytest.raises(BuildError) as refused:
        verify_store(store, [embedded])
    assert refused.value.message == expected


@pytest.mark.parametrize("stored_as", ["its architecture's image", "a re-pushed tag"])
def test_an_image_stored_under_another_digest_than_its_reference_pins_is_refused(
        tmp_path: Path, stored_as: str) -> None:
    """CRI-O finds an image by the digest the manifests name (the manifest list's). A store
    that holds it only under another digest (the per-architecture image's, or another image
    pushed under the same tag) would leave a device that boots offline unable to start it:
    the compose refuses it, naming both digests (issue 46)."""
    [pause] = [img for img in CORE if img.name == "pause"]
    [embedded] = embed(tmp_path, "aarch64", (pause,))
    store = tmp_path / "tree" / STORE.lstrip("/")
    images = store / "overlay-images/images.json"
    [record] = json.loads(images.read_text())
    other = (embedded.instance_digest if stored_as == "its architecture's image"
             else "sha256:" + "e" * 64)
    digests = {key: value for key, value in record["big-data-digests"].items()
               if key != f"manifest-{pause.digest}"}
    digests[f"manifest-{other}"] = other
    images.write_text(json.dumps([{**record, "digest": other, "big-data-digests": digests}]))
    with pytest.raises(BuildError) as refused:
        verify_store(store, [embedded])
    assert refused.value.message == (f"{pause.ref}: stored with digest {other}, expected "
                                     f"{pause.digest} (copied from {embedded.source})")


def test_a_registry_list_is_embedded_as_the_architectures_image(tmp_path: Path) -> None:
    layout = write_oci_layout(tmp_path / "layout", "core", "router")
    with registry({"sample/router": layout.layout}) as host:
        ref = f"{host}/sample/router@{layout.digest}"
        [embedded] = embed(tmp_path, "aarch64", (),
                           [ContainerSpec(ref, ref, tls_verify=False)])
    assert embedded.instance_digest == sample_instance_digest("core", "router", "aarch64")
    seen = inspect(tmp_path, ref, "arm64")
    assert (seen["Digest"], seen["Architecture"]) == (layout.digest, "arm64")
