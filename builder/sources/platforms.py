"""Which image of a pinned reference runs on an architecture.

A release pins each image by digest. For a multi-architecture image that digest names a
manifest list (Docker) or an image index (OCI), which is what registries serve for such
images: each entry names one platform's image manifest. A commit for aarch64 must embed
the arm64 image, so each image is resolved per architecture before anything is copied: a
list's entry for linux/GOARCH, or, when the digest names a single image, that image itself,
whose config must say the architecture. The entry is chosen as skopeo's `--override-arch`
chooses it (containers/image platform matching: no variant first, then arm64's base `v8`),
and the compose checks afterwards that skopeo embedded that very manifest.

Local sources (sample, oci:, oci-archive:, dir:, docker-archive:) are read here without
network, so the blueprint step can check them; registry references are read with
`skopeo inspect`, which only the compose does.
"""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from builder.core.errors import BuildError, InputError
from builder.core.runner import Runner
from builder.core.schema import key_text
from builder.release.model import GOARCH, Image
from builder.sources.samples import sample_blobs, sample_digest

DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
# containers/image's platform matcher: variants it accepts when none is asked for, in order.
VARIANTS = {"arm64": ("", "v8")}
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
SMALL_MEMBER = 4 << 20  # manifests and configs are kilobytes; layers are what is larger


@dataclass(frozen=True)
class ResolvedImage:
    """One architecture's image of a pinned reference."""

    ref: str
    arch: str                 # the release's architecture: x86_64, aarch64
    instance_digest: str      # that architecture's image manifest
    list_digest: str | None   # the ref's digest when it names a manifest list / image index


@dataclass(frozen=True)
class PinnedImage:
    """A reference to resolve, where to read it, and how errors name it."""

    ref: str                  # REPOSITORY[:TAG]@sha256:DIGEST
    # sample, oci:PATH, oci-archive:PATH, dir:PATH, docker-archive:PATH or docker://REF
    source: str
    file: str | None = None   # release.yaml when the release names the image
    field: str = ""           # e.g. components.core.images.pause.ref
    sample: tuple[str, str] | None = None  # (component, name) of a SAMPLE image
    tls_verify: bool = True

    @property
    def digest(self) -> str:
        return pinned_digest(self.ref)

    @property
    def repository(self) -> str:
        return repository_of(self.ref)

    def refuse(self, problem: str, hint: str | None = None) -> BuildError:
        if self.file is not None:
            return InputError(self.file, self.field, f"{self.ref}: {problem}", hint)
        return BuildError(f"image {self.ref}: {problem}", hint)


def pinned_digest(ref: str) -> str:
    return "sha256:" + ref.rsplit("@sha256:", 1)[1]


def repository_of(ref: str) -> str:
    """REPOSITORY of REPOSITORY[:TAG]@DIGEST (a registry's :PORT is not a tag)."""
    name = ref.split("@", 1)[0]
    slash, colon = name.rfind("/"), name.rfind(":")
    return name[:colon] if colon > slash else name


def registry_source(ref: str) -> str:
    """skopeo's name for a pinned registry image. The tag goes: skopeo (1.9) refuses a
    reference with both, and the digest alone says which image it is."""
    return f"docker://{repository_of(ref)}@{pinned_digest(ref)}"


def release_image(image: Image, release_file: str, tls_verify: bool = True) -> PinnedImage:
    """A release.yaml image: its source, or its registry when it has none."""
    source = image.source or registry_source(image.ref)
    return PinnedImage(
        ref=image.ref, source=source, file=release_file,
        field=f"components.{image.component}.images.{key_text(image.name)}.ref",
        sample=(image.component, image.name) if source == "sample" else None,
        tls_verify=tls_verify)


class ManifestSource(Protocol):
    def top(self) -> bytes | None:
        """The manifest the source holds (a list or an image); None when it holds an image
        without one (a docker-archive: skopeo writes its manifest while copying)."""

    def config(self, instance: str) -> bytes:
        """The config blob of the image manifest `instance`."""


def resolve_image(image: PinnedImage, arch: str, *, runner: Runner | None = None,
                  auth_file: Path | None = None) -> ResolvedImage:
    """The image of `image` for `arch`, or a refusal naming the image, the architecture and
    what the source offers. A registry reference needs `runner` (skopeo)."""
    return resolve_from(image, arch, source_for(image, runner, auth_file))


def resolve_from(image: PinnedImage, arch: str, source: ManifestSource) -> ResolvedImage:
    goarch = GOARCH[arch]
    top = source.top()
    if top is None:
        _check_config(image, arch, source.config(image.digest), "its image")
        return ResolvedImage(image.ref, arch, image.digest, None)
    if digest_of(top) != image.digest:
        raise image.refuse(f"{image.source} holds {digest_of(top)}, not the pinned digest",
                           hint="pin the digest the source holds, or point `source` at the "
                                "image the digest names")
    document = _json(image, top, "manifest")
    if not is_list(document):
        _check_config(image, arch, source.config(image.digest), "its only image")
        return ResolvedImage(image.ref, arch, image.digest, None)
    entry = choose_instance(document, goarch)
    if entry is None:
        raise image.refuse(
            f"no image for {arch} (linux/{goarch}): its manifest list offers "
            f"{', '.join(offered(document)) or 'nothing'}",
            hint=f"pin a manifest list with a linux/{goarch} image, or build the release "
                 f"without {arch} (release.yaml architectures)")
    _check_config(image, arch, source.config(entry), f"its linux/{goarch} entry {entry}")
    return ResolvedImage(image.ref, arch, entry, image.digest)


def is_list(document: dict[str, Any]) -> bool:
    # OCI makes an index's mediaType optional; its `manifests` key is what marks it.
    return document.get("mediaType") in (DOCKER_LIST, OCI_INDEX) or "manifests" in document


def choose_instance(document: dict[str, Any], goarch: str) -> str | None:
    """The digest of the list's linux/GOARCH entry, as containers/image picks it."""
    entries = [e for e in document.get("manifests", []) if isinstance(e, dict)]
    for variant in VARIANTS.get(goarch, ("",)):
        for entry in entries:
            platform = entry.get("platform") or {}
            if (platform.get("os"), platform.get("architecture"),
                    platform.get("variant", "")) == ("linux", goarch, variant):
                return str(entry.get("digest"))
    return None


def offered(document: dict[str, Any]) -> list[str]:
    """The list's platforms as os/architecture[/variant]."""
    names = []
    for entry in document.get("manifests", []):
        platform = (entry.get("platform") if isinstance(entry, dict) else None) or {}
        parts = [platform.get("os", "?"), platform.get("architecture", "?"),
                 platform.get("variant")]
        names.append("/".join(str(p) for p in parts if p))
    return names


def config_architecture(config: bytes) -> str | None:
    try:
        document = json.loads(config)
    except ValueError:
        return None
    value = document.get("architecture") if isinstance(document, dict) else None
    return value if isinstance(value, str) else None


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _check_config(image: PinnedImage, arch: str, config: bytes, what: str) -> None:
    goarch = GOARCH[arch]
    found = config_architecture(config)
    if found != goarch:
        raise image.refuse(
            f"no image for {arch} (linux/{goarch}): {what} is for "
            f"{found or 'no architecture'} (its config says so)",
            hint=f"pin a manifest list with a linux/{goarch} image, or an image built for "
                 f"{goarch}")


def _json(image: PinnedImage, data: bytes, what: str) -> dict[str, Any]:
    try:
        document = json.loads(data)
    except ValueError as exc:
        raise image.refuse(f"{image.source}: its {what} is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise image.refuse(f"{image.source}: its {what} is not a JSON object")
    return document


# --- sources ------------------------------------------------------------------------------


def source_for(image: PinnedImage, runner: Runner | None,
               auth_file: Path | None = None) -> ManifestSource:
    kind, _, location = image.source.partition(":")
    if kind == "sample":
        if image.sample is None:
            raise image.refuse("a SAMPLE image without its component and name")
        return sample_source(image, *image.sample)
    if kind == "docker":
        if runner is None:
            raise image.refuse("a registry image cannot be read without skopeo")
        return RegistrySource(image, runner, location.removeprefix("//"), auth_file)
    try:
        return _local_source(image, kind, Path(location))
    except (OSError, tarfile.TarError, KeyError, ValueError) as exc:
        raise image.refuse(f"{image.source} cannot be read: {exc}") from exc


def _local_source(image: PinnedImage, kind: str, path: Path) -> ManifestSource:
    if kind == "oci":
        return oci_layout(image, path)
    if kind == "oci-archive":
        return oci_archive(image, path)
    if kind == "dir":
        return dir_image(image, path)
    if kind == "docker-archive":
        return docker_archive(image, path)
    raise image.refuse(f"unknown image source {image.source!r}")


@dataclass(frozen=True)
class BlobSource:
    """Manifests and configs by digest: a sample, an OCI layout (directory or archive) or a
    dir: image. `read` raises OSError or KeyError for a digest the source lacks."""

    image: PinnedImage
    read: Callable[[str], bytes]
    top_digest: str   # what the layout's index.json (or manifest.json) names

    def top(self) -> bytes | None:
        return self._blob(self.top_digest)

    def config(self, instance: str) -> bytes:
        manifest = _json(self.image, self._blob(instance), f"manifest {instance}")
        descriptor = manifest.get("config")
        if not isinstance(descriptor, dict) or "digest" not in descriptor:
            raise self.image.refuse(f"{self.image.source}: manifest {instance} has no config")
        return self._blob(str(descriptor["digest"]))

    def _blob(self, digest: str) -> bytes:
        if not DIGEST_RE.match(digest):
            raise self.image.refuse(f"{self.image.source} names {digest!r}, not a sha256 "
                                    "digest")
        try:
            data = self.read(digest)
        except (OSError, KeyError) as exc:
            raise self.image.refuse(f"{self.image.source} lacks {digest}") from exc
        if digest_of(data) != digest:
            raise self.image.refuse(f"{self.image.source}: {digest} is damaged (its content "
                                    f"has digest {digest_of(data)})")
        return data


def sample_source(image: PinnedImage, component: str, name: str) -> BlobSource:
    blobs = sample_blobs(component, name)
    return BlobSource(image, blobs.__getitem__, sample_digest(component, name))


def oci_layout(image: PinnedImage, path: Path) -> BlobSource:
    index = _json(image, (path / "index.json").read_bytes(), "index.json")
    return BlobSource(image, lambda d: (path / "blobs" / d.replace(":", "/", 1)).read_bytes(),
                      _only_entry(image, index))


def oci_archive(image: PinnedImage, path: Path) -> BlobSource:
    members = _small_members(path)
    index = _json(image, members["index.json"], "index.json")
    return BlobSource(image, lambda d: members["blobs/" + d.replace(":", "/", 1)],
                      _only_entry(image, index))


def dir_image(image: PinnedImage, path: Path) -> BlobSource:
    """skopeo's dir: layout: manifest.json, HEX.manifest.json per list entry, blobs by HEX."""
    top = (path / "manifest.json").read_bytes()

    def read(digest: str) -> bytes:
        if digest == digest_of(top):
            return top
        hex_digest = digest.removeprefix("sha256:")
        manifest = path / f"{hex_digest}.manifest.json"
        return (manifest if manifest.is_file() else path / hex_digest).read_bytes()

    return BlobSource(image, read, digest_of(top))


@dataclass(frozen=True)
class DockerArchiveSource:
    image: PinnedImage
    config_blob: bytes

    def top(self) -> bytes | None:
        return None

    def config(self, instance: str) -> bytes:
        return self.config_blob


def docker_archive(image: PinnedImage, path: Path) -> DockerArchiveSource:
    members = _small_members(path)
    entries = json.loads(members["manifest.json"])
    if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
        count = len(entries) if isinstance(entries, list) else 0
        raise image.refuse(f"{image.source}: holds {count} images; skopeo copies one only "
                           "from an archive of one")
    return DockerArchiveSource(image, members[str(entries[0].get("Config"))])


@dataclass(frozen=True)
class RegistrySource:
    """`skopeo inspect` of the registry's manifest and of the chosen image's config."""

    image: PinnedImage
    runner: Runner
    reference: str
    auth_file: Path | None

    def top(self) -> bytes | None:
        return self._inspect(["--raw"], self.reference)

    def config(self, instance: str) -> bytes:
        return self._inspect(["--config", "--raw"], f"{self.image.repository}@{instance}")

    def _inspect(self, what: list[str], reference: str) -> bytes:
        argv = ["skopeo", "inspect", *what, "--retry-times", "3",
                f"--tls-verify={'true' if self.image.tls_verify else 'false'}"]
        if self.auth_file is not None:
            argv += ["--authfile", str(self.auth_file)]
        return self.runner.run([*argv, f"docker://{reference}"]).stdout


def _only_entry(image: PinnedImage, index: dict[str, Any]) -> str:
    entries = index.get("manifests")
    if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
        count = len(entries) if isinstance(entries, list) else 0
        raise image.refuse(f"{image.source}: index.json names {count} images; skopeo copies "
                           "from a layout of exactly one (an image or a manifest list)")
    return str(entries[0].get("digest"))


def _small_members(path: Path) -> dict[str, bytes]:
    """The archive's files small enough to be manifests or configs, read in one pass: its
    layers (the bulk of it) are skipped, never read."""
    members = {}
    with tarfile.open(path) as tar:
        for member in tar:
            if member.isfile() and member.size <= SMALL_MEMBER:
                handle = tar.extractfile(member)
                if handle is not None:
                    members[member.name.removeprefix("./")] = handle.read()
    return members
