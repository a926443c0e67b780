"""An image-mode update as a delta: the new image's changed layers as tar-diffs against the
files of the image a device runs, laid out as containers/oci-delta lays out its deltas.

The delta is an OCI image layout whose one manifest has artifactType
application/vnd.io.github.containers.oci-delta.v1 and an empty config. Its layers, each
annotated with `io.github.containers.delta.content`, are the new image's manifest and config
(`image-manifest`, `image-config`: the signed manifest, whose config names every layer's
diff_id) and one `image-layer` per layer the old image lacks, annotated
`io.github.containers.delta.to` with that layer's digest: the tar-diff when it is smaller
than the gzip'ed layer, else the layer itself. Layers the old image has are listed in the
`delta.reused` / `delta.reused-diff-id` annotations and not carried. The subject is the
new image's manifest.

One difference from oci-delta: a tar-diff here names its sources by their path in the old
image (tar-diff's own convention), not by ostree object path (oci-delta's chunked bootc
layers carry `sysroot/ostree/repo/objects/...`; this project's layers carry the image's
paths). Every tar-diff is applied back against the old image's files before the delta is
written, and the rebuilt layer must hash to its diff_id.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from builder.bootc import tardiff
from builder.bootc.oci import CONFIG, LAYER, MANIFEST, Blob, Layout, canonical
from builder.core.errors import BuildError
from builder.core.runner import Runner

ARTIFACT = "application/vnd.io.github.containers.oci-delta.v1"
EMPTY = "application/vnd.oci.empty.v1+json"
PREFIX = "io.github.containers.delta."
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def write_image_delta(layout: Layout, old_manifest: str, new_manifest: str, dest: Path,
                      runner: Runner, *, threads: int = 1) -> dict[str, Any]:
    """Write the delta from `old_manifest` to `new_manifest` (both in `layout`) as an OCI
    layout at `dest` (replaced whole), and say what it holds."""
    started = time.monotonic()
    old, new = layout.read_json(old_manifest), layout.read_json(new_manifest)
    new_config = layout.read_json(new["config"]["digest"])
    diff_ids = new_config.get("rootfs", {}).get("diff_ids", [])
    if len(diff_ids) != len(new["layers"]):
        raise BuildError(f"{layout.root}: manifest {new_manifest} has {len(new['layers'])} "
                         f"layers but its config {len(diff_ids)} diff_ids")
    had = {layer["digest"] for layer in old["layers"]}
    pairs = list(zip((layer["digest"] for layer in new["layers"]), diff_ids, strict=True))
    reused = [(digest, diff_id) for digest, diff_id in pairs if digest in had]
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{dest.name}.") as scratch:
        root = Path(scratch) / "old"
        unpack_image(layout, old_manifest, root)
        sources = tardiff.index_sources(root)
        out = Layout(Path(scratch) / "delta")
        out.init()
        entries = [
            _copy(layout, out, new_manifest, MANIFEST, "image-manifest"),
            _copy(layout, out, new["config"]["digest"], CONFIG, "image-config")]
        layers = []
        for layer, diff_id in zip(new["layers"], diff_ids, strict=True):
            if layer["digest"] in had:
                continue
            entry, record = _layer(layout, out, layer, diff_id, sources=sources,
                                   runner=runner, threads=threads)
            entries.append(entry)
            layers.append(record)
        subject = {"mediaType": MANIFEST, "digest": new_manifest,
                   "size": layout.blob_path(new_manifest).stat().st_size}
        manifest = _delta_manifest(out, entries, subject, source=old_manifest,
                                   source_config=old["config"]["digest"], reused=reused)
        shutil.rmtree(dest, ignore_errors=True)
        (Path(scratch) / "delta").rename(dest)
    blobs = sum(p.stat().st_size for p in (dest / "blobs/sha256").iterdir())
    return {"from_manifest": old_manifest, "to_manifest": new_manifest,
            "manifest": manifest.digest, "bytes": blobs, "layers": layers,
            "reused_layers": len(reused), "seconds": round(time.monotonic() - started, 3)}


def unpack_image(layout: Layout, manifest: str, root: Path) -> None:
    """The regular files of an image, as a device that runs it has them."""
    for layer in layout.read_json(manifest)["layers"]:
        for info, data in layout.members(layer["digest"]):
            name = tardiff.clean_path(info.name)
            if data is None or ".." in name.split("/") or not name:
                continue
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)


def _copy(layout: Layout, out: Layout, digest: str, media_type: str,
          content: str) -> dict[str, Any]:
    blob = out.put(layout.blob_path(digest).read_bytes())
    return blob.descriptor(media_type, annotations={PREFIX + "content": content})


def _layer(layout: Layout, out: Layout, layer: dict[str, Any], diff_id: str, *,
           sources: tardiff.Sources, runner: Runner, threads: int
           ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The smaller of the layer's tar-diff and the layer itself, the tar-diff checked by
    applying it."""
    stored = layout.blob_path(layer["digest"]).read_bytes()
    plain = gzip.decompress(stored)
    delta, stats = tardiff.make(plain, sources, runner, threads=threads)
    check = out.root.parent / "check.tar"
    tardiff.rebuild_layer(delta, sources.root, diff_id, check, runner,
                          what=f"tar-diff to {layer['digest'][:19]}")
    check.unlink()
    annotations = {PREFIX + "content": "image-layer", PREFIX + "to": layer["digest"]}
    record = {"to": layer["digest"], "diff_id": diff_id, "layer_bytes": len(stored),
              "tar_bytes": len(plain), "tar_diff_bytes": len(delta), **asdict(stats)}
    if len(delta) < len(stored):
        blob = out.put(delta)
        record["sent"] = "tar-diff"
        return blob.descriptor(tardiff.MEDIA_TYPE, annotations=annotations), record
    blob = out.put(stored)
    record["sent"] = "layer"
    return blob.descriptor(LAYER, annotations=annotations), record


def _delta_manifest(out: Layout, entries: list[dict[str, Any]], subject: dict[str, Any], *,
                    source: str, source_config: str, reused: list[tuple[str, str]]) -> Blob:
    empty = out.put(b"{}")
    new_manifest = subject["digest"]
    manifest = out.put(canonical({
        "schemaVersion": 2, "mediaType": MANIFEST, "artifactType": ARTIFACT,
        "config": empty.descriptor(EMPTY), "layers": entries, "subject": subject,
        "annotations": {
            PREFIX + "target": new_manifest, PREFIX + "source": source,
            PREFIX + "source-config": source_config,
            PREFIX + "reused": json.dumps([d for d, _ in reused], separators=(",", ":")),
            PREFIX + "reused-diff-id": json.dumps([i for _, i in reused],
                                                  separators=(",", ":"))}}))
    out.write_index([manifest.descriptor(MANIFEST, artifactType=ARTIFACT)])
    return manifest


def apply_image_delta(delta: Path, old_root: Path, out: Path, runner: Runner, *,
                      expected_manifest: str | None = None) -> dict[str, str]:
    """What a device does with a delta: rebuild each carried layer (uncompressed, named by
    its diff_id) into `out` from the files of the image it runs, each checked against the
    diff_id the delta's image config names; the layer digests rebuilt, by diff_id. Every
    blob must hash to its digest; `expected_manifest` is the signed image the device was
    told to take, which the delta's embedded manifest must be."""
    layout = Layout(delta)
    index = layout.index().get("manifests", [])
    if len(index) != 1 or index[0].get("artifactType") != ARTIFACT:
        raise tardiff.BadDelta(f"{delta}: not an oci-delta layout (one manifest of "
                               f"artifactType {ARTIFACT})")
    manifest = _json(layout, index[0], delta)
    parts = {entry.get("annotations", {}).get(PREFIX + "content"): entry
             for entry in manifest.get("layers", []) if isinstance(entry, dict)}
    if "image-manifest" not in parts or "image-config" not in parts:
        raise tardiff.BadDelta(f"{delta}: no embedded image manifest and config")
    if expected_manifest and parts["image-manifest"].get("digest") != expected_manifest:
        raise tardiff.BadDelta(f"{delta}: carries image {parts['image-manifest'].get('digest')}"
                               f", not the signed {expected_manifest}")
    image = _json(layout, parts["image-manifest"], delta)
    if image.get("config", {}).get("digest") != parts["image-config"].get("digest"):
        raise tardiff.BadDelta(f"{delta}: the embedded config is not the image manifest's")
    diff_ids = _diff_ids(image, _json(layout, parts["image-config"], delta), delta)
    out.mkdir(parents=True, exist_ok=True)
    rebuilt: dict[str, str] = {}
    for entry in manifest["layers"]:
        annotations = entry.get("annotations", {})
        if annotations.get(PREFIX + "content") != "image-layer":
            continue
        to = annotations.get(PREFIX + "to", "")
        if to not in diff_ids:
            raise tardiff.BadDelta(f"{delta}: a layer for {str(to)[:19]!r}, which the image's "
                                   "manifest does not have")
        data = _blob(layout, entry, delta)
        target = out / diff_ids[to].removeprefix("sha256:")
        if entry.get("mediaType") == tardiff.MEDIA_TYPE:
            tardiff.rebuild_layer(data, old_root, diff_ids[to], target, runner,
                                  what=f"{delta}: tar-diff to {to[:19]}")
        elif entry["digest"] != to:   # _blob checked that the data hashes to entry's digest
            raise tardiff.BadDelta(f"{delta}: the layer carried for {to[:19]} has other bytes")
        else:
            _check_whole(data, to, diff_ids[to], target, delta)
        rebuilt[diff_ids[to]] = to
    return rebuilt


def _diff_ids(image: dict[str, Any], config: dict[str, Any], delta: Path) -> dict[str, str]:
    """The image's layer digests to their diff_ids, each a sha256 digest."""
    layers, ids = image.get("layers", []), config.get("rootfs", {}).get("diff_ids", [])
    if not isinstance(layers, list) or not isinstance(ids, list) or len(layers) != len(ids):
        raise tardiff.BadDelta(f"{delta}: the image's layers and its config's diff_ids do "
                               "not pair up")
    digests = [layer.get("digest") if isinstance(layer, dict) else None for layer in layers]
    if not all(isinstance(d, str) and DIGEST.match(d) for d in [*digests, *ids]):
        raise tardiff.BadDelta(f"{delta}: a layer digest or diff_id is not sha256:<64 hex>")
    return dict(zip(digests, ids, strict=True))  # type: ignore[arg-type]


def _blob(layout: Layout, descriptor: dict[str, Any], delta: Path) -> bytes:
    """A blob of the delta, refused unless it is there and hashes to its digest."""
    digest = descriptor.get("digest")
    if not isinstance(digest, str) or not DIGEST.match(digest):
        raise tardiff.BadDelta(f"{delta}: blob digest {str(digest)[:80]!r} is not "
                               "sha256:<64 hex>")
    path = layout.blob_path(digest)
    if not path.is_file():
        raise tardiff.BadDelta(f"{delta}: blob {digest[:19]} is missing")
    data = path.read_bytes()
    if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
        raise tardiff.BadDelta(f"{delta}: blob {digest[:19]} does not hash to its digest")
    return data


def _json(layout: Layout, descriptor: dict[str, Any], delta: Path) -> dict[str, Any]:
    try:
        value = json.loads(_blob(layout, descriptor, delta))
    except ValueError as exc:
        raise tardiff.BadDelta(f"{delta}: blob {descriptor.get('digest')} is not JSON "
                               f"({exc})") from None
    if not isinstance(value, dict):
        raise tardiff.BadDelta(f"{delta}: blob {descriptor.get('digest')} is not a JSON "
                               "object")
    return value


def _check_whole(data: bytes, digest: str, diff_id: str, target: Path, delta: Path) -> None:
    """A layer carried whole (its bytes are the layer's: checked by digest): it must unpack
    to the layer's diff_id."""
    plain = gzip.decompress(data)
    if "sha256:" + hashlib.sha256(plain).hexdigest() != diff_id:
        raise tardiff.BadDelta(f"{delta}: layer {digest[:19]} is not diff_id {diff_id}")
    target.write_bytes(plain)
