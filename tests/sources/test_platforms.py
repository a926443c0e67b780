"""Per-architecture image resolution: a manifest list's entry for the architecture, or a
single image whose config says it; a refusal names the image, the architecture and what
the source offers. Local sources are read in Python; a registry through skopeo."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from builder.core.errors import BuildError, InputError
from builder.core.runner import Runner
from builder.release.model import Image, load_release
from builder.sources.platforms import (
    PinnedImage,
    choose_instance,
    registry_source,
    release_image,
    resolve_image,
)
from builder.sources.samples import (
    OciImage,
    sample_instance_digest,
    write_oci_layout,
    write_single_arch_layout,
)
from tests.support import requires
from tests.support.cli import RELEASE
from tests.support.registry import registry

REPO = "quay.io/example/pause"
FIELD = "components.core.images.pause.ref"
AMD64 = sample_instance_digest("core", "pause", "x86_64")
ARM64 = sample_instance_digest("core", "pause", "aarch64")


def pinned(layout: OciImage, source: str | None = None, digest: str | None = None
           ) -> PinnedImage:
    image = Image("core", "pause", f"{REPO}@{digest or layout.digest}",
                  source or f"oci:{layout.layout}")
    return release_image(image, "release.yaml")


@pytest.mark.parametrize(("arch", "instance"), [("x86_64", AMD64), ("aarch64", ARM64)])
def test_a_sample_image_resolves_to_its_architectures_own_image(arch: str,
                                                                 instance: str) -> None:
    [pause] = [img for img in load_release(RELEASE).images() if img.name == "pause"]
    found = resolve_image(release_image(pause, "release.yaml"), arch)
    assert (found.arch, found.instance_digest, found.list_digest) == \
        (arch, instance, pause.digest)


def test_a_list_without_arm64_is_refused_for_aarch64_naming_what_it_offers(
        tmp_path: Path) -> None:
    layout = write_oci_layout(tmp_path / "amd64-only", "core", "pause", arches=("x86_64",))
    image = pinned(layout)
    assert resolve_image(image, "x86_64").instance_digest == AMD64
    with pytest.raises(InputError) as refused:
        resolve_image(image, "aarch64")
    assert str(refused.value).split(" (hint: ")[0] == (
        f"release.yaml: {FIELD}: {image.ref}: no image for aarch64 (linux/arm64): its "
        "manifest list offers linux/amd64")
    assert refused.value.hint == ("pin a manifest list with a linux/arm64 image, or build the "
                                  "release without aarch64 (release.yaml architectures)")


def test_a_single_amd64_image_is_refused_for_aarch64_by_its_config(tmp_path: Path) -> None:
    layout = write_single_arch_layout(tmp_path / "amd64", "core", "pause", "x86_64")
    image = pinned(layout)
    found = resolve_image(image, "x86_64")
    assert (found.instance_digest, found.list_digest) == (AMD64, None)
    with pytest.raises(InputError) as refused:
        resolve_image(image, "aarch64")
    assert refused.value.message == (
        f"release.yaml: {FIELD}: {image.ref}: no image for aarch64 (linux/arm64): its only "
        "image is for amd64 (its config says so)")


def test_a_source_holding_another_image_than_the_pinned_digest_is_refused(
        tmp_path: Path) -> None:
    layout = write_oci_layout(tmp_path / "pause", "core", "pause")
    other = write_oci_layout(tmp_path / "next", "core", "pause", 1).digest
    with pytest.raises(InputError, match=rf"holds {layout.digest}, not the pinned digest"):
        resolve_image(pinned(layout, digest=other), "x86_64")


def test_arm64_entries_are_chosen_as_skopeo_chooses_them() -> None:
    def entry(digest: str, arch: str, variant: str | None = None, os: str = "linux"
              ) -> dict[str, object]:
        platform = {"os": os, "architecture": arch} | ({"variant": variant} if variant else {})
        return {"digest": digest, "platform": platform}

    v8 = {"manifests": [entry("a", "amd64"), entry("w", "arm64", os="windows"),
                        entry("v8", "arm64", "v8")]}
    assert choose_instance(v8, "arm64") == "v8"  # what registries label arm64 images
    both = {"manifests": [entry("v8", "arm64", "v8"), entry("plain", "arm64")]}
    assert choose_instance(both, "arm64") == "plain"  # no variant first, as containers/image
    assert choose_instance(v8, "amd64") == "a"
    assert choose_instance({"manifests": [entry("w", "arm64", os="windows")]}, "arm64") is None


@pytest.mark.integration
@pytest.mark.parametrize("transport", ["dir", "oci-archive"])
def test_a_list_copied_to_a_local_transport_resolves_per_architecture(
        tmp_path: Path, transport: str) -> None:
    requires.need_tools("skopeo")
    layout = write_oci_layout(tmp_path / "layout", "core", "pause")
    dest = f"{transport}:{tmp_path / 'copy'}"
    subprocess.run(["skopeo", "copy", "--quiet", "--all", "--preserve-digests",
                    f"oci:{layout.layout}", dest], check=True)
    image = pinned(layout, source=dest)
    assert [resolve_image(image, arch).instance_digest for arch in ("x86_64", "aarch64")] \
        == [AMD64, ARM64]


@pytest.mark.integration
def test_a_docker_archive_is_refused_for_another_architecture_than_its_config(
        tmp_path: Path) -> None:
    requires.need_tools("skopeo")
    layout = write_oci_layout(tmp_path / "layout", "core", "pause")
    archive = tmp_path / "pause.tar"
    subprocess.run(["skopeo", "copy", "--quiet", "--override-arch", "arm64",
                    f"oci:{layout.layout}", f"docker-archive:{archive}:{REPO}:latest"],
                   check=True)
    # skopeo writes the archive's manifest when copying from it: that digest is the pin.
    raw = subprocess.run(["skopeo", "inspect", "--raw", f"docker-archive:{archive}"],
                         capture_output=True, check=True).stdout
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    image = pinned(layout, source=f"docker-archive:{archive}", digest=digest)
    assert resolve_image(image, "aarch64").instance_digest == digest
    with pytest.raises(InputError) as refused:
        resolve_image(image, "x86_64")
    assert refused.value.message.endswith(
        f"{image.ref}: no image for x86_64 (linux/amd64): its image is for arm64 (its config "
        "says so)")


@pytest.mark.integration
def test_a_registry_list_resolves_per_architecture_through_skopeo(tmp_path: Path) -> None:
    requires.need_tools("skopeo")
    full = write_oci_layout(tmp_path / "full", "core", "pause")
    amd64_only = write_oci_layout(tmp_path / "amd64", "core", "pause", arches=("x86_64",))
    with registry({"sample/pause": full.layout, "sample/amd64": amd64_only.layout}) as host:
        tagged = f"{host}/sample/pause:4.14@{full.digest}"  # skopeo takes no tag with it
        image = PinnedImage(tagged, registry_source(tagged), tls_verify=False)
        found = resolve_image(image, "aarch64", runner=Runner())
        assert (found.instance_digest, found.list_digest) == (ARM64, full.digest)
        ref = f"{host}/sample/amd64@{amd64_only.digest}"
        lacking = PinnedImage(ref, registry_source(ref), tls_verify=False)
        with pytest.raises(BuildError) as refused:
            resolve_image(lacking, "aarch64", runner=Runner())
    assert refused.value.message == (f"image {lacking.ref}: no image for aarch64 "
                                     "(linux/arm64): its manifest list offers linux/amd64")
