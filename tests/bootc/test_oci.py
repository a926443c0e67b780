"""OCI layouts: one image of a shared layout as a layout of its own."""

from __future__ import annotations

import json
from pathlib import Path

from builder.bootc.oci import CONFIG, LAYER, MANIFEST, Layout, single_layout


def _image(layout: Layout, text: bytes) -> str:
    layer = layout.put(text)
    config = layout.put_json({"rootfs": {"type": "layers", "diff_ids": [layer.digest]}})
    return layout.put_json({"schemaVersion": 2, "mediaType": MANIFEST,
                            "config": config.descriptor(CONFIG),
                            "layers": [layer.descriptor(LAYER)]}).digest


def test_a_single_layout_holds_only_its_image_with_linked_blobs(tmp_path: Path) -> None:
    shared = Layout(tmp_path / "shared")
    shared.init()
    first, second = _image(shared, b"one"), _image(shared, b"two")
    dest = single_layout(shared, second, tmp_path / "single")
    [entry] = json.loads((dest / "index.json").read_text())["manifests"]
    assert entry == {"mediaType": MANIFEST, "digest": second,
                     "size": shared.blob_path(second).stat().st_size}
    single = Layout(dest)
    assert not single.blob_path(first).exists()
    kept = sorted(p.name for p in single.blobs.iterdir())
    assert len(kept) == 3 and all(
        (single.blobs / name).stat().st_ino == (shared.blobs / name).stat().st_ino
        for name in kept)
    assert single_layout(shared, second, dest) == dest   # again: the blobs are there
