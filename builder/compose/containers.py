"""Embed the blueprint's [[containers]] in the tree's read-only image store, as Image Builder does.

osbuild (org.osbuild.skopeo + org.osbuild.containers.storage.conf, wired by osbuild/images
for rpm-ostree images) copies each image with skopeo into
`containers-storage:[overlay@TREE/usr/share/containers/storage+RUNROOT]NAME` and adds that
directory to `additionalimagestores` in /etc/containers/storage.conf, so CRI-O finds the
images without any network.

A commit is for one architecture: each image is resolved for it first
(builder/sources/platforms.py), copied with `--override-arch`, and checked in the store
afterwards: findable by the digest its reference pins (a manifest list's, for a
multi-architecture image: the store keeps the list beside the chosen image), holding the
image resolved for the architecture, whose config says that architecture.

containers/storage is not reproducible by itself: it stamps `created` times into
images.json / layers.json, writes random tokens into its lock files and gives each overlay
layer a random short link name. `normalize_store` pins all three, so two composes of the
same images give the same bytes (and the same ostree commit).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit

from builder.compose.inputs import ContainerSpec
from builder.compose.rootfs import replace_file
from builder.core.errors import BuildError
from builder.core.runner import Runner
from builder.release.model import GOARCH, Image
from builder.sources.platforms import (
    PinnedImage,
    config_architecture,
    digest_of,
    registry_source,
    release_image,
    resolve_image,
)
from builder.sources.samples import write_oci_layout

STORE = "/usr/share/containers/storage"
STORAGE_CONF = "etc/containers/storage.conf"
CREATED_RE = re.compile(rb'"created":"[^"]*"')
STORAGE_CONF_HEADER = (
    "# This file is the configuration file for all tools that use the containers/storage\n"
    "# library. See 'man 5 containers-storage.conf' for more information.\n"
    "# Written by microshift-edge-builder: the images embedded in this ostree commit live in\n"
    f"# the read-only store {STORE}.\n\n")


@dataclass(frozen=True)
class EmbeddedImage:
    """An image in the tree's store. `digest` is the one its reference pins (a manifest
    list's for a multi-architecture image); `instance_digest` the manifest of the image
    embedded for `arch`, which equals `digest` for a single-architecture image."""

    name: str
    digest: str
    source: str
    arch: str
    instance_digest: str

    @property
    def list_digest(self) -> str | None:
        return self.digest if self.digest != self.instance_digest else None


def pinned_image(spec: ContainerSpec, release_images: Sequence[Image],
                 release_file: str = "release.yaml") -> PinnedImage:
    """The blueprint's image as release.yaml pins it (its source, its field for errors), or
    a registry image the release does not name."""
    match = next((img for img in release_images if img.ref == spec.source), None)
    if match is not None:
        return release_image(match, release_file, spec.tls_verify)
    return PinnedImage(spec.source, registry_source(spec.source), tls_verify=spec.tls_verify)


def image_source(image: PinnedImage, workdir: Path) -> str:
    """Where skopeo copies the image from: a SAMPLE image is written as an OCI layout first."""
    if image.sample is None:
        return image.source
    component, name = image.sample
    layout = write_oci_layout(workdir / "oci" / name, component, name)
    if layout.digest != image.digest:
        raise BuildError(f"sample image {name}: generated digest {layout.digest} "
                         f"differs from release.yaml's {image.digest}",
                         hint="release.yaml and builder/sources/samples.py disagree; "
                              "update the ref")
    return f"oci:{layout.layout}"


def store_reference(store: Path, runroot: Path, name: str) -> str:
    # skip_mount_home: the overlay driver otherwise bind-mounts its home on itself and
    # leaves that mount behind inside the tree.
    return f"containers-storage:[overlay@{store}+{runroot}:overlay.skip_mount_home=true]{name}"


def embed_images(runner: Runner, tree: Path, specs: Sequence[ContainerSpec],
                 release_images: Sequence[Image], *, arch: str, epoch: int, workdir: Path,
                 auth_file: Path | None = None,
                 release_file: str = "release.yaml") -> list[EmbeddedImage]:
    """Copy each image's `arch` image into the tree's store. Every image is resolved for
    `arch` first, so an image without one is refused before the store is touched."""
    if not specs:
        return []
    # Sorted: images.json lists images in copy order, which must not depend on the blueprint.
    ordered = sorted(specs, key=lambda s: s.name)
    pinned = [pinned_image(spec, release_images, release_file) for spec in ordered]
    resolved = [resolve_image(image, arch, runner=runner, auth_file=auth_file)
                for image in pinned]
    store = tree / STORE.lstrip("/")
    store.mkdir(parents=True, exist_ok=True)
    runroot = workdir / "containers-run"
    embedded: list[EmbeddedImage] = []
    for spec, image, found in zip(ordered, pinned, resolved, strict=True):
        source = image_source(image, workdir)
        argv = ["skopeo", "copy", "--quiet", "--preserve-digests", "--override-arch",
                GOARCH[arch], "--override-os", "linux"]
        if source.startswith("docker://"):
            argv += [f"--src-tls-verify={'true' if spec.tls_verify else 'false'}"]
            if auth_file is not None:
                argv += ["--src-authfile", str(auth_file)]
        runner.run([*argv, source, store_reference(store, runroot, spec.name)])
        embedded.append(EmbeddedImage(spec.name, image.digest, source, arch,
                                      found.instance_digest))
    shutil.rmtree(runroot, ignore_errors=True)
    normalize_store(store, epoch)
    verify_store(store, embedded)
    write_storage_conf(tree)
    return embedded


def normalize_store(store: Path, epoch: int) -> None:
    """Make the store's bytes a function of its images only (see the module docstring)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)).encode()
    for name in ("overlay-images/images.json", "overlay-layers/layers.json"):
        path = store / name
        if path.is_file():
            replace_file(path, CREATED_RE.sub(b'"created":"' + stamp + b'"', path.read_bytes()))
    # An empty lock file is a valid "never written" state for containers/storage.
    for lock in sorted(store.rglob("*.lock")):
        replace_file(lock, b"", mode=lock.stat().st_mode & 0o7777)
    _rename_overlay_links(store / "overlay")
    for scratch in ("tmp", "overlay/staging"):
        path = store / scratch
        if path.is_dir():
            for child in path.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()


def _rename_overlay_links(overlay: Path) -> None:
    """Replace overlay's random short layer names (l/NAME) with ones derived from layer ids."""
    links = overlay / "l"
    if not links.is_dir():
        return
    renames: dict[str, str] = {}
    for layer in sorted(p for p in overlay.iterdir() if (p / "link").is_file()):
        old = (layer / "link").read_text().strip()
        digest = hashlib.sha256(layer.name.encode()).digest()
        new = base64.b32encode(digest).decode()[:26]  # same length and alphabet as storage's
        renames[old] = new
        replace_file(layer / "link", new.encode())
    for old, new in renames.items():
        link = links / old
        target = link.readlink() if link.is_symlink() else None
        link.unlink(missing_ok=True)
        if target is not None:
            (links / new).symlink_to(target)
    for lower in sorted(overlay.glob("*/lower")):
        parts = lower.read_text().strip().split(":")
        fixed = [f"l/{renames.get(p[2:], p[2:])}" if p.startswith("l/") else p for p in parts]
        replace_file(lower, ":".join(fixed).encode())


def verify_store(store: Path, images: Sequence[EmbeddedImage]) -> None:
    """Each image is in the store under its name, reachable by the digest its reference pins,
    and is the image of its architecture: the manifest resolved for it, whose config says
    that architecture (what CRI-O runs is the store's `manifest` and its config)."""
    try:
        records: list[dict[str, Any]] = json.loads(
            (store / "overlay-images" / "images.json").read_text())
    except (OSError, ValueError) as exc:
        raise BuildError(f"{store}: no readable overlay-images/images.json: {exc}") from exc
    for image in images:
        record = next((r for r in records if image.name in r.get("names", [])), None)
        if record is None:
            raise BuildError(f"{image.name} is missing from the embedded store {store}")
        digests = record.get("big-data-digests", {})
        # containers/storage finds an image by any digest of its manifest-* big data.
        if digests.get(f"manifest-{image.digest}") != image.digest:
            raise BuildError(f"{image.name}: stored with digest {record.get('digest')}, "
                             f"expected {image.digest} (copied from {image.source})")
        manifest = _big_data(store, record, "manifest")
        if digest_of(manifest) != image.instance_digest:
            raise BuildError(f"{image.name}: the store holds image {digest_of(manifest)} for "
                             f"{image.arch}, expected {image.instance_digest} (the "
                             f"{image.arch} image of {image.digest})",
                             hint="skopeo chose another image of the manifest list; "
                                  "compose again, and report it if it persists")
        _check_stored_config(store, record, image, manifest)


def _check_stored_config(store: Path, record: dict[str, Any], image: EmbeddedImage,
                         manifest: bytes) -> None:
    try:
        config_digest = str(json.loads(manifest)["config"]["digest"])
    except (ValueError, KeyError, TypeError) as exc:
        raise BuildError(f"{image.name}: its stored manifest names no config") from exc
    config = _big_data(store, record, config_digest)
    if digest_of(config) != config_digest:
        raise BuildError(f"{image.name}: the store's config {config_digest} holds other bytes "
                         f"(their digest is {digest_of(config)})")
    found = config_architecture(config)
    if found != GOARCH[image.arch]:
        raise BuildError(f"{image.name}: the stored image's config says "
                         f"{found or 'no architecture'}, not {GOARCH[image.arch]} "
                         f"({image.arch})")


def _big_data(store: Path, record: dict[str, Any], key: str) -> bytes:
    """One of an image's big-data items, under the file name containers/storage gives it."""
    plain = all(c == "." or "0" <= c <= "9" or "a" <= c <= "z" for c in key)
    name = key if plain else "=" + base64.b64encode(key.encode()).decode()
    path = store / "overlay-images" / str(record.get("id")) / name
    try:
        return path.read_bytes()
    except OSError as exc:
        raise BuildError(f"{record.get('names')}: the store lacks its {key} ({path})") from exc


def write_storage_conf(tree: Path) -> None:
    """Add the store to `additionalimagestores` of the tree's storage.conf, keeping the file's
    comments, order and other settings (tomlkit), or write one when the base has none."""
    path = tree / STORAGE_CONF
    doc = tomlkit.parse(path.read_text()) if path.is_file() else \
        tomlkit.parse(STORAGE_CONF_HEADER)
    storage = doc.setdefault("storage", tomlkit.table())
    # The store is written by the overlay driver; a config naming no driver (no
    # containers-common in the base) would let the runtime pick another and miss it.
    storage.setdefault("driver", "overlay")
    options = storage.setdefault("options", tomlkit.table())
    stores = options.setdefault("additionalimagestores", tomlkit.array())
    if STORE not in stores:
        stores.append(STORE)
    replace_file(path, tomlkit.dumps(doc).encode())
