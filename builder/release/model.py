"""The release definition (release.yaml): what to build, validated before any work."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from builder.core.schema import Fields, load_yaml
from builder.release.catalog import BY_KEY
from builder.release.ostree_config import OstreeSettings, parse_ostree
from builder.release.payload import Payload, PayloadFile, parse_payload

__all__ = ["ComponentRelease", "Image", "Payload", "PayloadFile", "Release", "load_release"]

# rpm's own rule for Version and Release: no '-', no whitespace, ASCII only.
RPM_VERSION_RE = re.compile(r"^[A-Za-z0-9._+~^]+$")
# REPOSITORY@sha256:DIGEST, optionally with a tag in between (repo:tag@sha256:...).
IMAGE_REF_RE = re.compile(
    r"^(?P<repo>[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?@sha256:(?P<digest>[0-9a-f]{64})$")
SOURCE_KINDS = ("sample", "oci", "oci-archive", "docker-archive", "dir")
ARCHES = ("x86_64", "aarch64")
# Who keeps /var/lib/microshift per deployment across greenboot rollbacks (core.data_backup).
DATA_BACKUP = ("microshift", "greenboot")


@dataclass(frozen=True)
class Image:
    component: str
    name: str     # logical name, e.g. "ovnkube"
    ref: str      # repository@sha256:digest
    source: str | None = None  # "sample" | "oci:/path" | "oci-archive:/path" | ... | None=registry

    @property
    def repository(self) -> str:
        match = IMAGE_REF_RE.match(self.ref)
        assert match is not None
        return match.group("repo")

    @property
    def digest(self) -> str:
        return "sha256:" + self.ref.rsplit("@sha256:", 1)[1]


@dataclass(frozen=True)
class ComponentRelease:
    key: str
    payload: tuple[PayloadFile, ...]  # only core has files: the binaries of the release
    images: tuple[Image, ...]
    # core only: "microshift" when the binary backs up and restores its own data at start
    # (MicroShift 4.14 and later, pkg/admin/prerun), "greenboot" for this project's scripts.
    data_backup: str | None = None


@dataclass(frozen=True)
class Repo:
    """A yum repository for depsolving: a local path, a URL, or the generated sample base."""

    name: str
    kind: str  # "path" | "url" | "sample"
    location: str


@dataclass(frozen=True)
class Release:
    path: Path
    version: str
    release: str
    architectures: tuple[str, ...]
    source_date_epoch: int
    components: tuple[ComponentRelease, ...]
    base_repos: tuple[Repo, ...]
    # Optional `ostree:` section (builder/release/ostree_config.py): ref, base commit, deltas.
    ostree: OstreeSettings = field(default_factory=OstreeSettings)

    @property
    def evr(self) -> str:
        return f"{self.version}-{self.release}"

    def component(self, key: str) -> ComponentRelease:
        for comp in self.components:
            if comp.key == key:
                return comp
        raise KeyError(key)

    def images(self, keys: tuple[str, ...] | None = None) -> tuple[Image, ...]:
        return tuple(img for comp in self.components
                     if keys is None or comp.key in keys for img in comp.images)

    @property
    def payload(self) -> tuple[PayloadFile, ...]:
        return self.component("core").payload

    @property
    def data_backup(self) -> str:
        return self.component("core").data_backup or default_data_backup(self.version)


def default_data_backup(version: str) -> str:
    """MicroShift 4.14 and later back up and restore their data at start (pkg/admin/prerun)."""
    match = re.match(r"^(\d+)\.(\d+)", version)
    if match is None:
        return "greenboot"
    return "microshift" if (int(match.group(1)), int(match.group(2))) >= (4, 14) else \
        "greenboot"


def load_release(path: Path) -> Release:
    file = str(path)
    top = Fields(file, "", load_yaml(path))
    version = top.check("version", top.get("version", str, required=True),
                        RPM_VERSION_RE.match, "letters, digits and . _ + ~ ^ (no '-', rpm rule)")
    release = str(top.get("release", int | str, required=True))  # type: ignore[arg-type]
    top.check("release", release, RPM_VERSION_RE.match,
              "letters, digits and . _ + ~ ^ (no '-', rpm rule)")
    arches = tuple(top.get("architectures", list, ["x86_64"]))
    for arch in arches:
        top.check("architectures", arch, lambda a: a in ARCHES, ", ".join(ARCHES))
    epoch = top.get("source_date_epoch", int, required=True)
    top.check("source_date_epoch", epoch, lambda e: 315532800 <= e < 2**32,
              "a Unix time from 1980-01-01 to 2106 (zip and rpm limits)")
    comps_fields = top.child("components", required=True)
    assert comps_fields is not None
    components = tuple(_component(comps_fields, key, path.parent)
                       for key in comps_fields.data)
    if "core" not in comps_fields.data:
        raise comps_fields.error("core", "is required: every release ships microshift-core")
    base = top.child("base")
    _check_image_names(comps_fields, components)
    repos = _base_repos(base, path.parent) if base else (Repo("sample-base", "sample", ""),)
    ostree = parse_ostree(top.child("ostree"), path.parent)
    top.close()
    return Release(path=path, version=version, release=release, architectures=arches,
                   source_date_epoch=epoch, components=components, base_repos=repos,
                   ostree=ostree)


def _component(parent: Fields, key: str, root: Path) -> ComponentRelease:
    if key not in BY_KEY:
        raise parent.error(key, "unknown component; allowed: " + ", ".join(BY_KEY))
    fields = parent.child(key) or Fields(parent.file, parent.path(key), {})
    payload_fields = fields.child("payload")
    payload = parse_payload(payload_fields, root) if payload_fields else ()
    if payload and key != "core":
        raise fields.error("payload", "only core has a payload (the microshift binaries); "
                                      "components ship their files from specs/sources/")
    if key == "core" and not payload:
        raise fields.error("payload", "is required for core (the microshift binary)")
    data_backup = None
    if key == "core":
        data_backup = fields.get("data_backup", str)
        if data_backup is not None:
            fields.check("data_backup", data_backup, DATA_BACKUP.__contains__,
                         ", ".join(DATA_BACKUP))
    images_fields = fields.child("images")
    images: list[Image] = []
    if images_fields:
        for name in images_fields.data:
            images.append(_image(images_fields, key, str(name), root))
    fields.close()
    return ComponentRelease(key=key, payload=payload, images=tuple(images),
                            data_backup=data_backup)


def _check_image_names(fields: Fields, components: tuple[ComponentRelease, ...]) -> None:
    """A logical image name means one image: release-ARCH.json lists images by name."""
    seen: dict[str, Image] = {}
    for comp in components:
        for image in comp.images:
            other = seen.setdefault(image.name, image)
            if other.ref != image.ref:
                raise fields.error(f"{comp.key}.images.{image.name}",
                                   f"names another image than components.{other.component}."
                                   f"images.{image.name} ({other.ref}); allowed: one image "
                                   "per name across the release")


def _image(parent: Fields, component: str, name: str, root: Path) -> Image:
    spec = parent.data[name]
    # An image may be given as a bare reference string or as {ref, source}.
    fields = Fields(parent.file, parent.path(name),
                    {"ref": spec} if isinstance(spec, str) else spec)
    ref = fields.get("ref", str, required=True)
    if "@sha256:" not in ref:
        raise fields.error("ref", f"image {ref!r} is not pinned by digest; allowed: "
                                  "REPOSITORY@sha256:<64 hex digits>",
                           hint="find the digest with `skopeo inspect docker://IMAGE`")
    fields.check("ref", ref, IMAGE_REF_RE.match, "REPOSITORY[:TAG]@sha256:<64 hex digits>")
    source = fields.get("source", str)
    if source is not None:
        kind, _, location = source.partition(":")
        fields.check("source", source, lambda _s: kind in SOURCE_KINDS,
                     "sample, or one of oci:PATH, oci-archive:PATH, docker-archive:PATH, dir:PATH")
        if kind != "sample":
            resolved = (root / location).resolve()
            if not resolved.exists():
                raise fields.error("source", f"{resolved} does not exist")
            source = f"{kind}:{resolved}"
    fields.close()
    return Image(component=component, name=name, ref=ref, source=source)


def _base_repos(fields: Fields, root: Path) -> tuple[Repo, ...]:
    items = fields.get("repos", list, required=True)
    repos: list[Repo] = []
    for index, item in enumerate(items):
        repo = Fields(fields.file, f"{fields.prefix}.repos[{index}]", item)
        name = repo.get("name", str, required=True)
        if repo.get("sample", bool, False):
            repos.append(Repo(name, "sample", ""))
        elif repo.has("url"):
            url = repo.check("url", repo.get("url", str), lambda u: u.startswith(
                ("https://", "http://", "file://")), "an http(s):// or file:// URL")
            repos.append(Repo(name, "url", url))
        elif repo.has("path"):
            location = (root / repo.get("path", str)).resolve()
            if not (location / "repodata" / "repomd.xml").is_file():
                raise repo.error("path", f"{location} is not a yum repository (no repodata)")
            repos.append(Repo(name, "path", str(location)))
        else:
            raise repo.error("url", "give one of url, path, or sample: true")
        repo.close()
    fields.close()
    return tuple(repos)
