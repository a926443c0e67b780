"""The image-mode delta (builder/bootc/image_delta.py) on two small images in one OCI layout,
as the bootc stage leaves them: only the changed layer is carried, as a tar-diff a device
turns back into the layer's exact bytes; a delta whose blobs, digests or embedded image were
tampered with is refused with one line before anything is written outside `out`.

Integration tier: the builder's bsdiff and the real zstd."""

from __future__ import annotations

import gzip
import hashlib
import random
from pathlib import Path
from typing import Any

import pytest

from builder.bootc.image_delta import (
    ARTIFACT,
    PREFIX,
    apply_image_delta,
    unpack_image,
    write_image_delta,
)
from builder.bootc.oci import CONFIG, LAYER, MANIFEST, Layout
from builder.bootc.tardiff import BadDelta
from builder.core.runner import Runner
from tests.support import requires
from tests.support.oci_images import layer_tar, put_image

pytestmark = pytest.mark.integration

TOOL = random.Random(3).randbytes(300_000)


@pytest.fixture(autouse=True)
def _zstd() -> None:
    requires.need_tools("zstd")


@pytest.fixture
def built(tmp_path: Path) -> tuple[Layout, str, str, Path, bytes]:
    layout = Layout(tmp_path / "image")
    layout.init()
    base = layer_tar({"etc/os-release": b"NAME=sample\n" * 20})
    old = put_image(layout, [base, layer_tar({"usr/bin/tool": TOOL})])
    new_layer = layer_tar({"usr/bin/tool": TOOL[:100] + b"4.14.3" + TOOL[100:]})
    new = put_image(layout, [base, new_layer])
    return layout, old, new, tmp_path / "delta", new_layer


def test_only_the_changed_layer_travels_and_is_rebuilt_exactly(
        built: tuple[Layout, str, str, Path, bytes], tmp_path: Path) -> None:
    layout, old, new, dest, new_layer = built
    report = write_image_delta(layout, old, new, dest, Runner())
    assert report["reused_layers"] == 1 and len(report["layers"]) == 1
    assert report["layers"][0]["sent"] == "tar-diff"
    assert report["layers"][0]["tar_diff_bytes"] < 2000 < len(gzip.compress(new_layer)) // 100
    device = tmp_path / "device"
    unpack_image(layout, old, device)
    rebuilt = apply_image_delta(dest, device, tmp_path / "out", Runner(),
                                expected_manifest=new)
    diff_id = "sha256:" + hashlib.sha256(new_layer).hexdigest()
    assert list(rebuilt) == [diff_id]
    assert (tmp_path / "out" / diff_id.removeprefix("sha256:")).read_bytes() == new_layer


def _delta_manifest(dest: Path) -> tuple[Layout, dict[str, Any]]:
    layout = Layout(dest)
    [entry] = layout.index()["manifests"]
    return layout, layout.read_json(entry["digest"])


def _replace_manifest(layout: Layout, manifest: dict[str, Any]) -> None:
    blob = layout.put_json(manifest)
    layout.root.joinpath("index.json").unlink(missing_ok=True)
    layout.write_index([blob.descriptor(MANIFEST, artifactType=ARTIFACT)])


def test_a_tampered_delta_is_refused_with_one_line(
        built: tuple[Layout, str, str, Path, bytes], tmp_path: Path) -> None:
    layout, old, new, dest, _ = built
    write_image_delta(layout, old, new, dest, Runner())
    device = tmp_path / "device"
    unpack_image(layout, old, device)

    def refused(expected: str, **kwargs: Any) -> None:
        with pytest.raises(BadDelta) as caught:
            apply_image_delta(dest, device, tmp_path / "out", Runner(), **kwargs)
        assert expected in str(caught.value) and "\n" not in str(caught.value)

    refused("not the signed sha256:" + "0" * 64, expected_manifest="sha256:" + "0" * 64)
    delta_layout, manifest = _delta_manifest(dest)
    [layer] = [e for e in manifest["layers"]
               if e["annotations"][PREFIX + "content"] == "image-layer"]
    blob = delta_layout.blob_path(layer["digest"])
    original = blob.read_bytes()
    blob.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    refused("does not hash to its digest")
    blob.write_bytes(original)
    layer["digest"] = "sha256:../../../../etc/passwd"
    _replace_manifest(delta_layout, manifest)
    refused("is not sha256:<64 hex>")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_diff_id_that_is_no_digest_writes_nothing(tmp_path: Path) -> None:
    """A forged but self-consistent delta whose config names a path as a diff_id."""
    delta = Layout(tmp_path / "delta")
    delta.init()
    config = delta.put_json({"rootfs": {"diff_ids": ["sha256:../../escaped"]}})
    layer = delta.put(b"not used")
    image = delta.put_json({"config": config.descriptor(CONFIG),
                            "layers": [layer.descriptor(LAYER)]})
    manifest = {"layers": [
        image.descriptor(MANIFEST, annotations={PREFIX + "content": "image-manifest"}),
        config.descriptor(CONFIG, annotations={PREFIX + "content": "image-config"})]}
    _replace_manifest(delta, manifest)
    with pytest.raises(BadDelta, match="diff_id is not sha256:<64 hex>"):
        apply_image_delta(tmp_path / "delta", tmp_path, tmp_path / "out", Runner())
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "out").exists()
