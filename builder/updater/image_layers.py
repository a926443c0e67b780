"""From a verified image-mode delta to what bootc is handed: the signed image's changed
layers rebuilt (builder/updater/image_apply.py), then an OCI image layout bootc switches to
(`bootc switch --transport oci PATH`).

Trust runs from the signed index to the layers: the index names the new image's manifest
digest; the delta's embedded manifest must be that one; the manifest names its config by
digest; the config's diff_ids name every layer's uncompressed bytes; every rebuilt layer
must hash to its diff_id. The layout carries the layers uncompressed (OCI's
`layer.v1.tar`): gzip'ing them again would give the signed compressed digests only with the
builder's very zlib, and bootc imports a layer by its content either way. Its manifest is
the signed one with each layer's descriptor made the uncompressed one, annotated with the
signed manifest's digest: a pure function of the signed manifest, so the same update always
gives the same local digest. Layers the booted image already has are not carried: bootc
(ostree-rs-ext) reuses a layer it imported before; the layout lists them all.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from builder.updater.image_apply import (
    CONFIG,
    DIGEST,
    INDEX,
    LAYER_TAR,
    MANIFEST,
    PREFIX,
    SIGNED,
    TAR_DIFF,
    BadImageDelta,
    DeltaLayout,
    Rebuilt,
    _gunzip_checked,
    _object,
    apply_tar_diff,
    deployment_resolver,
)


def rebuild_layers(delta: Path, booted: Path, out: Path, signed_manifest: str, *,
                   budget: int) -> Rebuilt:
    """Rebuild every layer the delta at `delta` carries into `out` (made anew), from the
    files of the booted deployment `booted`, for the image whose manifest digest the signed
    index names."""
    layout = DeltaLayout(delta)
    manifest = layout.manifest()
    parts = _parts(manifest, delta)
    if parts["image-manifest"].get("digest") != signed_manifest:
        carried = str(parts["image-manifest"].get("digest"))
        raise BadImageDelta(f"{delta}: carries image {carried[:19]}, not the signed "
                            f"{signed_manifest[:19]}")
    image_bytes, image = layout.json(parts["image-manifest"])
    if image.get("config", {}).get("digest") != parts["image-config"].get("digest"):
        raise BadImageDelta(f"{delta}: the embedded config is not the signed manifest's")
    config_bytes, config = layout.json(parts["image-config"])
    pairs = _diff_ids(image, config, delta)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    top = Path(os.path.realpath(booted))
    resolve = deployment_resolver(top)
    layers: dict[str, Path] = {}
    written = 0
    for entry in manifest.get("layers", []):
        annotations = entry.get("annotations", {}) if isinstance(entry, dict) else {}
        if annotations.get(PREFIX + "content") != "image-layer":
            continue
        to = annotations.get(PREFIX + "to", "")
        if to not in pairs:
            raise BadImageDelta(f"{delta}: a layer for {str(to)[:19]!r}, which the signed "
                                "manifest does not have")
        diff_id = pairs[to]
        target = out / diff_id[len("sha256:"):]
        blob = layout.blob(entry)
        what = f"{delta.name}: layer {to[:19]}"
        if entry.get("mediaType") == TAR_DIFF:
            written += apply_tar_diff(blob, resolve, top, target, diff_id,
                                      budget=budget - written, what=what)
        elif entry.get("digest") == to:
            written += _gunzip_checked(blob, target, diff_id, budget=budget - written,
                                       what=what)
        else:
            raise BadImageDelta(f"{what}: carried whole with other bytes")
        layers[diff_id] = target
    return Rebuilt(signed_manifest, image_bytes, config_bytes, layers, list(pairs.values()),
                   written)


def _parts(manifest: dict[str, Any], delta: Path) -> dict[str, dict[str, Any]]:
    parts = {entry.get("annotations", {}).get(PREFIX + "content"): entry
             for entry in manifest.get("layers", []) if isinstance(entry, dict)}
    if "image-manifest" not in parts or "image-config" not in parts:
        raise BadImageDelta(f"{delta}: no embedded image manifest and config")
    return parts


def _diff_ids(image: dict[str, Any], config: dict[str, Any], delta: Path) -> dict[str, str]:
    """The signed image's layer digests to their diff_ids, in layer order."""
    layers, ids = image.get("layers"), config.get("rootfs", {}).get("diff_ids")
    if not isinstance(layers, list) or not isinstance(ids, list) or len(layers) != len(ids):
        raise BadImageDelta(f"{delta}: the signed image's layers and its config's diff_ids "
                            "do not pair up")
    digests = [layer.get("digest") if isinstance(layer, dict) else None for layer in layers]
    if not all(isinstance(d, str) and DIGEST.match(d) for d in [*digests, *ids]):
        raise BadImageDelta(f"{delta}: a layer digest or diff_id is not sha256:<64 hex>")
    # (Python 3.9: no zip strict; the lengths were compared above)
    return {digests[n]: ids[n] for n in range(len(ids))}  # type: ignore[misc]


def local_manifest(rebuilt: Rebuilt, sizes: dict[str, int]) -> bytes:
    """The signed manifest with uncompressed layer descriptors (digest = diff_id), for the
    layers whose size is known; annotated with the signed manifest's digest."""
    image = _object(rebuilt.manifest, "the signed manifest")
    layers = []
    for number, layer in enumerate(image["layers"]):
        diff_id = rebuilt.diff_ids[number]
        layers.append({"mediaType": LAYER_TAR, "digest": diff_id,
                       "size": sizes.get(diff_id, layer.get("size", 0))})
    annotations = dict(image.get("annotations") or {})
    annotations[SIGNED] = rebuilt.manifest_digest
    local = {**image, "mediaType": MANIFEST, "layers": layers, "annotations": annotations}
    return json.dumps(local, sort_keys=True, separators=(",", ":")).encode()


def write_layout(rebuilt: Rebuilt, dest: Path, sizes: dict[str, int]) -> str:
    """The OCI layout bootc switches to (store_layout); the digest of its manifest. The
    rebuilt layers are moved, not copied: the disk holds each once."""
    manifest = local_manifest(rebuilt, {**sizes, **{
        d: path.stat().st_size for d, path in rebuilt.layers.items()}})
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    config = _object(rebuilt.manifest, "manifest")["config"]["digest"]
    assert config == "sha256:" + hashlib.sha256(rebuilt.config).hexdigest()
    store_layout(dest, (rebuilt.config, manifest), rebuilt.layers,
                 {"mediaType": MANIFEST, "digest": digest, "size": len(manifest),
                  "annotations": {SIGNED: rebuilt.manifest_digest}})
    return digest


def store_layout(dest: Path, documents: Iterable[bytes], files: Mapping[str, Path],
                 entry: dict[str, Any]) -> Path:
    """An OCI layout at `dest` whose index names `entry`: `documents` stored by their
    digests, `files` (digest -> path) moved in. Written beside `dest` and renamed into
    place, so a run cut short leaves no layout that looks whole."""
    tmp = dest.with_name(f".{dest.name}.new")
    shutil.rmtree(tmp, ignore_errors=True)
    blobs = tmp / "blobs/sha256"
    blobs.mkdir(parents=True)
    for digest, path in files.items():
        os.replace(path, blobs / digest[len("sha256:"):])
    for data in documents:
        (blobs / hashlib.sha256(data).hexdigest()).write_bytes(data)
    (tmp / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    index = {"schemaVersion": 2, "mediaType": INDEX, "manifests": [entry]}
    (tmp / "index.json").write_text(json.dumps(index, sort_keys=True))
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return dest


__all__ = ["CONFIG", "local_manifest", "rebuild_layers", "store_layout", "write_layout"]
