"""The device's image-mode delta applier (builder/updater/image_apply.py, image_layers.py,
standard library and the zstd tool only) against the builder's (builder/bootc/image_delta.py):
the same delta gives byte-identical layers, read from the files of an ostree deployment
(/etc kept as /usr/etc); a delta that rebuilds a layer with another digest, or reads outside
the booted image, or is cut short, is refused in one line with nothing left behind.

Integration tier: the builder's bsdiff makes the deltas, the real zstd decompresses."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from builder.bootc import tardiff
from builder.bootc.image_delta import PREFIX, apply_image_delta, unpack_image, write_image_delta
from builder.bootc.oci import Layout
from builder.core.runner import Runner
from builder.updater.image_apply import (
    HEADER,
    BadImageDelta,
    apply_tar_diff,
    deployment_resolver,
)
from builder.updater.image_layers import rebuild_layers, write_layout
from tests.support import requires
from tests.support.oci_images import layer_tar, put_image

pytestmark = pytest.mark.integration

TOOL = random.Random(3).randbytes(300_000)
BIG = 1 << 30


@pytest.fixture(autouse=True)
def _zstd() -> None:
    requires.need_tools("zstd")


@pytest.fixture
def built(tmp_path: Path) -> tuple[Layout, str, str, Path, Path]:
    """Two images and their delta: the tool patched, /etc's config changed, a file moved."""
    layout = Layout(tmp_path / "image")
    layout.init()
    conf = b"option = 1\n" * 300
    base = layer_tar({"usr/lib/os-release": b"NAME=sample\n" * 20})
    old = put_image(layout, [base, layer_tar({"usr/bin/tool": TOOL, "etc/tool.conf": conf,
                                      "usr/share/a/data": TOOL[::-1]})])
    new = put_image(layout, [base, layer_tar({
        "usr/bin/tool": TOOL[:100] + b"4.14.3" + TOOL[100:],
        "etc/tool.conf": conf + b"option = 2\n", "usr/share/b/data": TOOL[::-1]})])
    dest = tmp_path / "delta"
    write_image_delta(layout, old, new, dest, Runner())
    device = tmp_path / "deployment"
    unpack_image(layout, old, device)
    (device / "etc").rename(device / "usr/etc")   # as ostree deploys an image: /usr/etc
    (device / "etc").mkdir()
    (device / "etc/tool.conf").write_bytes(b"an admin's edit\n")   # the merged /etc
    return layout, old, new, dest, device


def test_the_device_rebuilds_the_builders_layers_byte_for_byte(
        built: tuple[Layout, str, str, Path, Path], tmp_path: Path) -> None:
    layout, old, new, dest, device = built
    builder_root = tmp_path / "builder-root"
    unpack_image(layout, old, builder_root)
    expected = apply_image_delta(dest, builder_root, tmp_path / "builder-out", Runner(),
                                 expected_manifest=new)
    rebuilt = rebuild_layers(dest, device, tmp_path / "out", new, budget=BIG)
    assert set(rebuilt.layers) == set(expected) and len(expected) == 1
    for diff_id, path in rebuilt.layers.items():
        hexdigest = diff_id.removeprefix("sha256:")
        assert path.read_bytes() == (tmp_path / "builder-out" / hexdigest).read_bytes()
    digest = write_layout(rebuilt, tmp_path / "oci", {})
    index = json.loads((tmp_path / "oci/index.json").read_text())
    assert index["manifests"][0]["digest"] == digest
    local = json.loads((tmp_path / "oci/blobs/sha256" / digest[7:]).read_bytes())
    assert local["annotations"]["io.microshift.update.signed-manifest"] == new
    assert local["config"] == layout.read_json(new)["config"]


def _swap_layer(dest: Path, data: bytes) -> None:
    """Replace the delta's carried layer by `data`, keeping the delta self-consistent: only
    the signed image's diff_ids can tell."""
    delta = Layout(dest)
    [entry] = delta.index()["manifests"]
    manifest = delta.read_json(entry["digest"])
    [layer] = [e for e in manifest["layers"]
               if e["annotations"][PREFIX + "content"] == "image-layer"]
    blob = delta.put(data)
    layer.update(digest=blob.digest, size=blob.size, mediaType=tardiff.MEDIA_TYPE)
    new_manifest = delta.put_json(manifest)
    (dest / "index.json").unlink()
    delta.write_index([{**entry, "digest": new_manifest.digest, "size": new_manifest.size}])


def test_a_delta_rebuilding_another_layer_is_refused_and_leaves_nothing(
        built: tuple[Layout, str, str, Path, Path], tmp_path: Path) -> None:
    _, _, new, dest, device = built
    other = layer_tar({"usr/bin/tool": b"a tool the release never had\n" * 10})
    forged, _ = tardiff.make(other, tardiff.index_sources(device), Runner())
    _swap_layer(dest, forged)
    with pytest.raises(BadImageDelta) as caught:
        rebuild_layers(dest, device, tmp_path / "out", new, budget=BIG)
    message = str(caught.value)
    assert "rebuilds a layer with diff_id sha256:" in message and "\n" not in message
    assert not any((tmp_path / "out").iterdir())


def test_a_delta_for_another_image_is_refused(built: tuple[Layout, str, str, Path, Path],
                                              tmp_path: Path) -> None:
    _, old, _, dest, device = built
    with pytest.raises(BadImageDelta, match=f"not the signed {old[:19]}"):
        rebuild_layers(dest, device, tmp_path / "out", old, budget=BIG)


def _raw(tmp_path: Path, ops: bytes) -> Path:
    compressed = subprocess.run(["zstd", "-q", "-c", "-"], input=ops, capture_output=True,
                                check=True).stdout
    path = tmp_path / "raw.tardiff"
    path.write_bytes(HEADER + compressed)
    return path


@pytest.mark.parametrize(("ops", "words"), [
    (b"\x01\x0b../../x/etc", "is not a plain relative path"),
    (b"\x01\x04link\x02\x01", "is not a regular file of the booted image"),
    (b"\x01\x04file\x02\x09", "reads past the end of file"),
    (b"\x00\x0aabc", "the stream ends inside an op's data"),
    (b"\x00\xff", "the stream ends inside an op's size"),
    (b"\x07\x00", "unknown op 7"),
    (b"\x02\x01", "reads a source before any is opened"),
    (b"\x00\x80\x80\x80\x40", "an op of"),
    (b"\x00\x05hello", "the staging budget"),
])
def test_hostile_tar_diffs_are_refused_in_one_line(tmp_path: Path, ops: bytes,
                                                   words: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "file").write_bytes(b"12345678")
    (root / "link").symlink_to("/etc/passwd")
    out = tmp_path / "layer.tar"
    with pytest.raises(BadImageDelta) as caught:
        apply_tar_diff(_raw(tmp_path, ops), deployment_resolver(root), root, out,
                       "sha256:" + "0" * 64, budget=4, what="raw")
    assert words in str(caught.value) and "\n" not in str(caught.value)
    assert not out.exists()


def test_a_corrupt_zstd_stream_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.tardiff"
    path.write_bytes(HEADER + b"\x28\xb5\x2f\xfd" + bytes(40))
    with pytest.raises(BadImageDelta, match=r"does not decompress|stream ends"):
        apply_tar_diff(path, deployment_resolver(tmp_path), tmp_path, tmp_path / "o.tar",
                       "sha256:" + "0" * 64, budget=BIG, what="bad")
    assert not (tmp_path / "o.tar").exists()
