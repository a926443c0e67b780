"""The changed layers of an image, from its registry: what an image-mode device fetches when
the signed index offers no delta from the image it runs (a device on an image the publisher
made no delta from, a device migrating from its ostree commit, a delta never made).

As bootc pulls (ostree-rs-ext's container import): the manifest by the signed digest (its
bytes must hash to that digest: the registry itself is not trusted), the config it names,
and only the layers whose diff_id the device has not imported yet (the ostree refs
ostree/container/blob/sha256_3A_HEX); each layer downloaded resumably with HTTP ranges (the
same Download as delta files: cuts resumed from the last byte, the bandwidth cap, the
deadline) and checked by size and digest before anything is staged. The result is an OCI
image layout with the manifest, the config and the new layers only: bootc reads a layer it
already has from its own store, not from the layout.

The registry is the OCI distribution API under https://HOST/v2/NAMESPACE/NAME/ for the
index's reference HOST/NAMESPACE/NAME, or under update.yaml's `image_registry_url` (a
mirror, or plain http on a site's own network).
"""

from __future__ import annotations

import hashlib
import http.client
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.core.errors import BuildError
from builder.updater.delta_download import Download, Limits, Transfer
from builder.updater.fetch import Patience, request
from builder.updater.image_index import DIGEST, ImageIndex
from builder.updater.image_layers import store_layout
from builder.updater.index import DeltaFile, UpdateRefused

MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.v2+json")
MAX_DOCUMENT = 4 * 1024 * 1024
MAX_LAYERS = 256
PULL_DIR = "pull"     # STAGING/pull/HEX/: one layer's download (its part and record)


@dataclass(frozen=True)
class Pulled:
    layout: Path          # the OCI layout bootc switches to
    fetched: int          # layers downloaded (or found complete from an earlier run)
    kept: int             # layers the device had: not downloaded
    layer_bytes: int      # the downloaded layers' size


def repository_url(reference: str, registry_url: str) -> str:
    """The distribution API's base for `reference`'s repository."""
    host, _, name = reference.partition("/")
    base = registry_url.rstrip("/") if registry_url else f"https://{host}"
    return f"{base}/v2/{name}/"


def get_document(url: str, digest: str, patience: Patience, accept: str) -> bytes:
    """A manifest or config by digest, whole; refused unless its bytes hash to `digest`."""
    try:
        with request(url, patience, headers={"Accept": accept}) as response:
            if response.status != 200:
                raise UpdateRefused(f"GET {url}: HTTP {response.status} {response.reason}"
                                    .rstrip(), hint="the registry does not serve the signed "
                                    "image; the next run asks again")
            data = response.read_all(MAX_DOCUMENT)
    except (OSError, http.client.HTTPException) as exc:
        raise BuildError(f"GET {url}: {exc}", hint="the next run asks again") from exc
    if len(data) > MAX_DOCUMENT or "sha256:" + hashlib.sha256(data).hexdigest() != digest:
        raise UpdateRefused(f"GET {url}: the registry's answer does not hash to {digest[:19]}",
                            hint="nothing was staged; the registry or a proxy on the way "
                                 "serves other bytes than the signed image's")
    return data


def image_parts(manifest: bytes, config: bytes, what: str) -> list[tuple[dict[str, Any], str]]:
    """Each layer's descriptor with its diff_id, in order."""
    try:
        layers = json.loads(manifest)["layers"]
        diff_ids = json.loads(config)["rootfs"]["diff_ids"]
    except (ValueError, KeyError, TypeError) as exc:
        raise UpdateRefused(f"{what}: not an image manifest and config ({exc})") from None
    if not isinstance(layers, list) or not isinstance(diff_ids, list) or \
            len(layers) != len(diff_ids) or len(layers) > MAX_LAYERS:
        raise UpdateRefused(f"{what}: the manifest's layers and the config's diff_ids differ "
                            f"(or more than {MAX_LAYERS})")
    # Paired by position (zip's strict= is Python 3.10; the device may run 3.9).
    pairs = [(layers[n], diff_ids[n]) for n in range(len(layers))]
    for layer, diff_id in pairs:
        if not isinstance(layer, dict) or not DIGEST.match(str(layer.get("digest"))) or \
                not isinstance(layer.get("size"), int) or layer["size"] < 0 or \
                not DIGEST.match(str(diff_id)):
            raise UpdateRefused(f"{what}: layer {str(layer)[:120]!r} has no sha256 digest, "
                                "size and diff_id")
    return pairs


def layer_ref(diff_id: str) -> str:
    """Where bootc (ostree-rs-ext) keeps an imported layer, by its diff_id."""
    return "ostree/container/blob/" + diff_id.replace(":", "_3A_")


class LayerPull:
    """One run's pull of `index`'s image into STAGING (`staging`)."""

    def __init__(self, run: Any, index: ImageIndex, staging: Path) -> None:
        self.run = run
        self.index = index
        self.staging = staging
        self.base = repository_url(index.reference, run.config.image_registry_url)
        self.transfer = Transfer()

    def documents(self) -> tuple[bytes, bytes, list[tuple[dict[str, Any], str]]]:
        run, manifest = self.run, self.index.manifest
        data = get_document(self.base + "manifests/" + manifest, manifest, run.patience,
                            ", ".join(MANIFEST_TYPES))
        try:
            config_digest = str(json.loads(data)["config"]["digest"])
        except (ValueError, KeyError, TypeError):
            config_digest = ""
        if not DIGEST.match(config_digest):
            raise UpdateRefused(f"{manifest[:19]}: the manifest names no sha256 config")
        config = get_document(self.base + "blobs/" + config_digest, config_digest,
                              run.patience, "application/octet-stream")
        run.metadata_bytes += len(data) + len(config)
        return data, config, image_parts(data, config, manifest[:19])

    def missing(self, parts: list[tuple[dict[str, Any], str]]) -> list[dict[str, Any]]:
        """The layers the device has not imported, each once."""
        system, seen, wanted = self.run.system, set(), []
        for layer, diff_id in parts:
            have = system.ostree("rev-parse", layer_ref(diff_id), check=False).strip()
            if not have and layer["digest"] not in seen:
                seen.add(layer["digest"])
                wanted.append(layer)
        return wanted

    def downloads(self, layers: list[dict[str, Any]], limits: Limits) -> list[Download]:
        made = []
        for layer in layers:
            hexdigest = layer["digest"][len("sha256:"):]
            entry = DeltaFile(f"{hexdigest}.layer", None, self.index.index.to_commit,
                              layer["size"], hexdigest)
            made.append(Download(self.staging / PULL_DIR / hexdigest,
                                 self.base + "blobs/" + layer["digest"], entry, limits,
                                 self.run._progress, vouched_by="the signed manifest"))
        return made

    def fetch(self, downloads: list[Download]) -> list[Path]:
        """Each layer, complete and verified; the transfers summed in `transfer`."""
        files = []
        for one in downloads:
            try:
                files.append(one.run())
            finally:
                for name in ("received", "requests", "interruptions", "restarts",
                             "resumed_from"):
                    setattr(self.transfer, name,
                            getattr(self.transfer, name) + getattr(one.transfer, name))
        return files


def write_pulled_layout(dest: Path, manifest: bytes, digest: str, config: bytes,
                        layers: list[Path]) -> Path:
    """An OCI layout of the signed manifest, its config and the downloaded layers (moved),
    written atomically as the rebuilt image's (store_layout)."""
    media = json.loads(manifest).get("mediaType") or MANIFEST_TYPES[0]
    files = {"sha256:" + path.name.removesuffix(".layer"): path for path in layers}
    return store_layout(dest, (manifest, config), files,
                        {"mediaType": media, "digest": digest, "size": len(manifest)})
