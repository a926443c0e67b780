"""Embed the blueprint's [[containers]] in the tree's read-only image store, as Image Builder does.

osbuild (org.osbuild.skopeo + org.osbuild.containers.storage.conf, wired by osbuild/images
for rpm-ostree images) copies each image with skopeo into
`containers-storage:[overlay@TREE/usr/share/containers/storage+RUNROOT]NAME` and adds that
directory to `additionalimagestores` in /etc/containers/storage.conf, so CRI-O finds the
images without any network.

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
from builder.release.model import Image
from builder.release.samples import write_oci_layout

STORE = "/usr/share/containers/storage"
STORAGE_CONF = "etc/containers/storage.conf"
GOARCH = {"x86_64": "amd64", "aarch64": "arm64"}
CREATED_RE = re.compile(rb'"created":"[^"]*"')
STORAGE_CONF_HEADER = (
    "# This file is the configuration file for all tools that use the containers/storage\n"
    "# library. See 'man 5 containers-storage.conf' for more information.\n"
    "# Written by microshift-edge-builder: the images embedded in this ostree commit live in\n"
    f"# the read-only store {STORE}.\n\n")


@dataclass(frozen=True)
class EmbeddedImage:
    name: str
    digest: str
    source: str


def image_source(spec: ContainerSpec, release_images: Sequence[Image], arch: str,
                 workdir: Path) -> str:
    """Where skopeo copies the image from: the release's local source, else the registry."""
    match = next((img for img in release_images if img.ref == spec.source), None)
    if match is not None and match.source == "sample":
        layout = write_oci_layout(workdir / "oci" / match.name, match.component, match.name, arch)
        if layout.digest != match.digest:
            raise BuildError(f"sample image {match.name}: generated digest {layout.digest} "
                             f"differs from release.yaml's {match.digest}",
                             hint="release.yaml and builder/release/samples.py disagree; "
                                  "update the ref")
        return f"oci:{layout.layout}"
    if match is not None and match.source is not None:
        return match.source
    return f"docker://{spec.source}"


def store_reference(store: Path, runroot: Path, name: str) -> str:
    # skip_mount_home: the overlay driver otherwise bind-mounts its home on itself and
    # leaves that mount behind inside the tree.
    return f"containers-storage:[overlay@{store}+{runroot}:overlay.skip_mount_home=true]{name}"


def embed_images(runner: Runner, tree: Path, specs: Sequence[ContainerSpec],
                 release_images: Sequence[Image], *, arch: str, epoch: int, workdir: Path,
                 auth_file: Path | None = None) -> list[EmbeddedImage]:
    if not specs:
        return []
    store = tree / STORE.lstrip("/")
    store.mkdir(parents=True, exist_ok=True)
    runroot = workdir / "containers-run"
    embedded: list[EmbeddedImage] = []
    # Sorted: images.json lists images in copy order, which must not depend on the blueprint.
    for spec in sorted(specs, key=lambda s: s.name):
        source = image_source(spec, release_images, arch, workdir)
        argv = ["skopeo", "copy", "--quiet", "--preserve-digests", "--override-arch",
                GOARCH.get(arch, arch), "--override-os", "linux"]
        if source.startswith("docker://"):
            argv += [f"--src-tls-verify={'true' if spec.tls_verify else 'false'}"]
            if auth_file is not None:
                argv += ["--src-authfile", str(auth_file)]
        runner.run([*argv, source, store_reference(store, runroot, spec.name)])
        embedded.append(EmbeddedImage(spec.name, "sha256:" + spec.source.rsplit("@sha256:")[1],
                                      source))
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
    """Each image is in the store under its name, with the digest its reference pins."""
    try:
        records: list[dict[str, Any]] = json.loads(
            (store / "overlay-images" / "images.json").read_text())
    except (OSError, ValueError) as exc:
        raise BuildError(f"{store}: no readable overlay-images/images.json: {exc}") from exc
    for image in images:
        record = next((r for r in records if image.name in r.get("names", [])), None)
        if record is None:
            raise BuildError(f"{image.name} is missing from the embedded store {store}")
        digests = {record.get("digest"), *record.get("big-data-digests", {}).values()}
        if image.digest not in digests:
            raise BuildError(f"{image.name}: stored with digest {record.get('digest')}, "
                             f"expected {image.digest} (copied from {image.source})")


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
