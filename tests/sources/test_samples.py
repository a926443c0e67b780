"""The SAMPLE images: each one a deterministic OCI image index naming an amd64 and an arm64
image, so a release of either architecture (or both) finds its images offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from builder.sources.samples import (
    OCI_INDEX,
    sample_digest,
    sample_instance_digest,
    write_oci_layout,
    write_single_arch_layout,
)

# The pause image's amd64 manifest as release.yaml pinned it before the sample images had
# an index: the amd64 images a commit embeds did not change when the index came.
PAUSE_AMD64 = "sha256:e32876c49a0f95ae3e97ea67fa741cc4e06e6c2d3d2496cb79eb451030074c6d"


def blob(layout: Path, digest: str) -> Any:
    return json.loads((layout / "blobs" / digest.replace(":", "/")).read_bytes())


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_sample_image_is_an_index_of_an_amd64_and_an_arm64_image(tmp_path: Path) -> None:
    one = write_oci_layout(tmp_path / "one", "core", "pause")
    two = write_oci_layout(tmp_path / "two", "core", "pause")
    assert files(one.layout) == files(two.layout)  # byte for byte: digests are pinned
    assert one.digest == sample_digest("core", "pause")
    [top] = json.loads((one.layout / "index.json").read_bytes())["manifests"]
    assert (top["mediaType"], top["digest"]) == (OCI_INDEX, one.digest)
    index = blob(one.layout, one.digest)
    assert [entry["platform"] for entry in index["manifests"]] == [
        {"architecture": "amd64", "os": "linux"}, {"architecture": "arm64", "os": "linux"}]
    for entry, arch, goarch in zip(index["manifests"], ("x86_64", "aarch64"),
                                   ("amd64", "arm64"), strict=True):
        assert entry["digest"] == sample_instance_digest("core", "pause", arch)
        config = blob(one.layout, blob(one.layout, entry["digest"])["config"]["digest"])
        assert (config["architecture"], config["os"]) == (goarch, "linux")
    assert index["manifests"][0]["digest"] == PAUSE_AMD64


def test_a_revision_is_a_new_build_of_every_architectures_image(tmp_path: Path) -> None:
    first = write_oci_layout(tmp_path / "r0", "networking-ovnk", "ovn-kubernetes")
    second = write_oci_layout(tmp_path / "r1", "networking-ovnk", "ovn-kubernetes", 1)
    assert second.digest != first.digest
    old, new = (blob(image.layout, image.digest)["manifests"] for image in (first, second))
    assert [e["platform"] for e in new] == [e["platform"] for e in old]
    assert not {e["digest"] for e in new} & {e["digest"] for e in old}


def test_a_single_architecture_layout_names_the_image_itself(tmp_path: Path) -> None:
    image = write_single_arch_layout(tmp_path / "amd64", "core", "pause", "x86_64")
    assert image.digest == PAUSE_AMD64
    [top] = json.loads((image.layout / "index.json").read_bytes())["manifests"]
    assert top["digest"] == PAUSE_AMD64
    assert blob(image.layout, blob(image.layout, PAUSE_AMD64)["config"]["digest"])[
        "architecture"] == "amd64"
