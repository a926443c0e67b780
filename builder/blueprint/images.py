"""The offline guarantee: every image a component's manifests run is in the image cache.

A device must start MicroShift with no network (seed 004), so every image that any manifest
of the chosen components' plugins names must be embedded through the blueprint's
`[[containers]]`, by digest. The scanner reads the components' rendered package trees (the
plugin directories /usr/lib/microshift/components.d/NNN-name/ with their kustomize files),
finds each pod container's `image:` (containers, initContainers, ephemeralContainers) and
applies kustomization `images:` rewrites (name -> newName, newTag, digest) as kustomize would.
The CRI-O drop-ins a package ships (etc/crio/crio.conf.d/*.conf) are read too: their
`crio.image.pause_image` is the infra container of every pod, so it must be cached as well.
Images handed over any other way (environment values, text a plugin script prints) are not
seen: components keep their pod images in manifest files for this check to work.

Each cached image must also have an image for every architecture of the release
(builder/sources/platforms.py). Images with a local source (sample, oci:, ...) are checked
here, offline; registry images only when the compose copies them, so this step never
needs a registry.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from builder.core.errors import BuildError, InputError
from builder.core.templates import render_source_tree
from builder.release.catalog import component
from builder.release.model import Release
from builder.release.template_context import component_context
from builder.sources.platforms import release_image, resolve_image

POD_CONTAINER_KEYS = ("containers", "initContainers", "ephemeralContainers")
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
KUSTOMIZATION_NAMES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
DIGEST_RE = re.compile(r"@sha256:[0-9a-f]{64}$")
CRIO_DROPINS = "etc/crio/crio.conf.d"


@dataclass(frozen=True)
class ManifestImage:
    file: str   # relative to the scanned tree
    field: str  # where in the document, e.g. "spec.template.spec.containers[0].image"
    ref: str    # after kustomize image rewrites


@dataclass(frozen=True)
class ImageRewrite:
    """One entry of a kustomization's `images:` list."""

    directory: str  # the kustomization's directory, relative to the tree; applies below it
    name: str
    new_name: str | None
    new_tag: str | None
    digest: str | None


def split_ref(ref: str) -> tuple[str, str | None, str | None]:
    """REPOSITORY[:TAG][@DIGEST] -> (repository, tag, digest)."""
    name, _, digest = ref.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = None
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
    return name, tag, digest or None


def scan_tree(root: Path) -> list[ManifestImage]:
    """Every pod container image named by the YAML/JSON manifests under root."""
    found: list[tuple[str, str, str]] = []
    rewrites: list[ImageRewrite] = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if path.parent == root / CRIO_DROPINS and path.suffix == ".conf":
            found += _crio_images(path, path.relative_to(root).as_posix())
            continue
        if path.suffix not in MANIFEST_SUFFIXES and path.name not in KUSTOMIZATION_NAMES:
            continue
        rel = path.relative_to(root).as_posix()
        try:
            docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise BuildError(f"{rel}: not a valid YAML/JSON manifest: {exc}") from exc
        for index, doc in enumerate(docs):
            prefix = f"(document {index + 1})" if len(docs) > 1 else ""
            if path.name in KUSTOMIZATION_NAMES or _kind(doc) == "Kustomization":
                rewrites += _rewrites(doc, path.parent.relative_to(root).as_posix(), rel)
            for field, ref in _pod_images(doc, prefix):
                found.append((rel, field, ref))
    return [ManifestImage(rel, field, _rewrite(ref, rel, rewrites)) for rel, field, ref in found]


def _crio_images(path: Path, rel: str) -> list[tuple[str, str, str]]:
    try:
        config = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BuildError(f"{rel}: not a valid CRI-O drop-in (TOML): {exc}") from exc
    image = config.get("crio", {}).get("image", {})
    ref = image.get("pause_image") if isinstance(image, dict) else None
    return [(rel, "crio.image.pause_image", ref)] if isinstance(ref, str) else []


def _kind(doc: Any) -> object:
    return doc.get("kind") if isinstance(doc, dict) else None


def _pod_images(node: Any, path: str) -> Iterable[tuple[str, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}.{key}" if path else str(key)
            if key in POD_CONTAINER_KEYS and isinstance(value, list):
                for index, item in enumerate(value):
                    if isinstance(item, dict) and isinstance(item.get("image"), str):
                        yield f"{here}[{index}].image", item["image"]
            yield from _pod_images(value, here)
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _pod_images(item, f"{path}[{index}]")


def _rewrites(doc: Any, directory: str, rel: str) -> list[ImageRewrite]:
    entries = doc.get("images") if isinstance(doc, dict) else None
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise BuildError(f"{rel}: images: expected a list of {{name, newName, newTag, digest}}")
    rewrites = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise BuildError(f"{rel}: images[{index}]: expected a mapping with a name")
        rewrites.append(ImageRewrite(directory, entry["name"], entry.get("newName"),
                                     entry.get("newTag"), entry.get("digest")))
    return rewrites


def _rewrite(ref: str, rel: str, rewrites: Sequence[ImageRewrite]) -> str:
    # kustomize applies the innermost kustomization first, then the ones above it.
    applicable = [r for r in rewrites
                  if r.directory == "." or rel.startswith(r.directory.rstrip("/") + "/")]
    for rule in sorted(applicable, key=lambda r: -_depth(r.directory)):
        name, tag, digest = split_ref(ref)
        if name != rule.name:
            continue
        name = rule.new_name or name
        if rule.digest:
            tag, digest = None, rule.digest
        elif rule.new_tag:
            tag, digest = rule.new_tag, None
        ref = name + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")
    return ref


def _depth(directory: str) -> int:
    return 0 if directory == "." else directory.count("/") + 1


def missing_images(found: Mapping[str, Sequence[ManifestImage]],
                   cached: Iterable[str]) -> list[str]:
    """One line per manifest image that is a bare tag or absent from the image cache."""
    cache = set(cached)
    problems = []
    for key, images in found.items():
        for image in images:
            where = f"component {key}: {image.file}: {image.field}"
            if not DIGEST_RE.search(image.ref):
                problems.append(f"{where}: image {image.ref} is a tag without a digest; "
                                "an offline device cannot pull it. Pin it as "
                                "REPOSITORY@sha256:DIGEST (the component's images in "
                                "release.yaml, used through {{ images[...] }})")
            elif image.ref not in cache:
                problems.append(f"{where}: image {image.ref} is not in the blueprint's "
                                f"[[containers]]; add it to release.yaml "
                                f"components.{key}.images")
    return problems


def component_images(release: Release, components: Sequence[str],
                     workdir: Path) -> dict[str, list[ManifestImage]]:
    """Render each component's package tree into workdir and scan it."""
    found: dict[str, list[ManifestImage]] = {}
    for key in components:
        dest = workdir / key
        dest.mkdir(parents=True, exist_ok=True)
        render_source_tree(component(key).package, component_context(release, key), dest)
        found[key] = scan_tree(dest)
    return found


def check_architectures(release: Release, cached: Iterable[str], blueprint: str) -> None:
    """Refuse the first cached image with a local source that has no image for one of the
    release's architectures, naming the image, the architecture and the blueprint."""
    wanted = set(cached)
    for image in release.images():
        if image.ref not in wanted or image.source is None:
            continue
        pinned = release_image(image, str(release.path))
        for arch in release.architectures:
            try:
                resolve_image(pinned, arch)
            except InputError as exc:
                raise InputError(exc.path, exc.field,
                                 f"{exc.problem}; {blueprint} caches it for a release of "
                                 f"{', '.join(release.architectures)}", exc.hint) from exc
