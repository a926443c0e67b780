"""Small OCI images made in a test: layers as uncompressed tars of given files, pushed into a
layout (builder/bootc/oci.py) with their config and manifest."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile

from builder.bootc.oci import CONFIG, LAYER, MANIFEST, Layout


def layer_tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def put_image(layout: Layout, layers: list[bytes]) -> str:
    """The manifest digest of an image of `layers` (gzipped) in `layout`."""
    blobs = [layout.put(gzip.compress(layer, mtime=0)) for layer in layers]
    config = layout.put_json({"rootfs": {"type": "layers", "diff_ids": [
        "sha256:" + hashlib.sha256(layer).hexdigest() for layer in layers]}})
    manifest = layout.put_json({"schemaVersion": 2, "mediaType": MANIFEST,
                                "config": config.descriptor(CONFIG),
                                "layers": [b.descriptor(LAYER) for b in blobs]})
    return manifest.digest
