"""The release definition (release.yaml): what to build, validated before any work."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from builder.core.errors import InputError
from builder.core.models import key_text, validate
from builder.core.schema import load_yaml
from builder.release import document
from builder.release.document import IMAGE_REF_RE, ReleaseDocument
from builder.release.ostree_config import OstreeSettings, settings_from
from builder.release.payload import ArchPayloads, Payload, PayloadFile, release_payload

__all__ = ["GOARCH", "ArchPayloads", "ComponentRelease", "Image", "LintAcceptance", "Payload",
           "PayloadFile", "Release", "load_release"]

# A release's architectures as container images name them (OCI `platform.architecture`, the
# image config's `architecture`, skopeo's --override-arch): Go's GOARCH values.
GOARCH = {"x86_64": "amd64", "aarch64": "arm64"}

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
    payload: ArchPayloads  # only core has files: the binaries of the release
    images: tuple[Image, ...]
    # core only: "microshift" when the binary backs up and restores its own data at start
    # (MicroShift 4.14 and later, pkg/admin/prerun), "greenboot" for this project's scripts.
    data_backup: str | None = None

    def payload_for(self, arch: str) -> tuple[PayloadFile, ...]:
        """The files this component's `arch` package installs from the release's payload."""
        return self.payload.files_for(arch)


@dataclass(frozen=True)
class Repo:
    """A yum repository for depsolving: a local path, a URL, or the generated sample base."""

    name: str
    kind: str  # "path" | "url" | "sample"
    location: str  # may hold {arch} or dnf's $basearch: one repository per architecture

    def location_for(self, arch: str) -> str:
        return self.location.replace("{arch}", arch).replace("$basearch", arch)


@dataclass(frozen=True)
class LintAcceptance:
    """An rpmlint finding accepted for a file of the core payload (release.yaml's
    `rpmlint.accept`): the check, the file's install path and why it is justified."""

    check: str
    path: str
    why: str
    field: str  # where release.yaml names it, e.g. rpmlint.accept[0]


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
    # release.yaml's architectures, even when a run is narrowed to one (`--arch`): artifacts
    # of a several-architecture release carry their architecture in their names.
    declared_architectures: tuple[str, ...] = ()
    # rpmlint findings accepted for the payload's files (builder/rpm/lint.py filters them).
    lint_acceptances: tuple[LintAcceptance, ...] = ()

    @property
    def multiarch(self) -> bool:
        return len(self.declared_architectures or self.architectures) > 1

    def arch_name(self, name: str, arch: str) -> str:
        """An artifact's file name: NAME, or NAME-ARCH for a several-architecture release."""
        return f"{name}-{arch}" if self.multiarch else name

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

    def payload_for(self, arch: str) -> tuple[PayloadFile, ...]:
        """The payload files (the MicroShift binaries) of microshift-core for `arch`."""
        return self.component("core").payload_for(arch)

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
    """Validate release.yaml (`ReleaseDocument`), then what a schema cannot: files exist."""
    file = str(path)
    doc = validate(ReleaseDocument, load_yaml(path), file)
    root = path.parent
    architectures = tuple(doc.architectures)
    components = tuple(_component(key, comp or document.Component(), architectures, root, file)
                       for key, comp in doc.components.items())
    repos = (tuple(_repo(repo, index, root, file, architectures)
                   for index, repo in enumerate(doc.base.repos))
             if doc.base else (Repo("sample-base", "sample", ""),))
    return Release(path=path, version=doc.version, release=doc.release,
                   architectures=architectures, declared_architectures=architectures,
                   source_date_epoch=doc.source_date_epoch, components=components,
                   base_repos=repos, ostree=settings_from(doc.ostree, root, file),
                   lint_acceptances=tuple(
                       LintAcceptance(entry.check, entry.path, entry.why, f"rpmlint.accept[{i}]")
                       for i, entry in enumerate(doc.rpmlint.accept if doc.rpmlint else ())))


def _component(key: str, doc: document.Component, architectures: tuple[str, ...], root: Path,
               file: str) -> ComponentRelease:
    prefix = f"components.{key}"
    payload = release_payload(doc.payload, architectures, root, file, f"{prefix}.payload") \
        if doc.payload else ArchPayloads(f"{prefix}.payload")
    images = tuple(_image(key, name, spec, root, file)
                   for name, spec in (doc.images or {}).items())
    return ComponentRelease(key=key, payload=payload, images=images,
                            data_backup=doc.data_backup)


def _image(component: str, name: str, doc: document.Image, root: Path, file: str) -> Image:
    source = doc.source
    if source is not None and source != "sample":
        kind, _, location = source.partition(":")
        resolved = (root / location).resolve()
        if not resolved.exists():
            raise InputError(file, f"components.{component}.images.{key_text(name)}.source",
                             f"{resolved} does not exist")
        source = f"{kind}:{resolved}"
    return Image(component=component, name=name, ref=doc.ref, source=source)


def _repo(doc: document.Repo, index: int, root: Path, file: str,
          arches: tuple[str, ...]) -> Repo:
    if doc.sample:
        return Repo(doc.name, "sample", "")
    if doc.url is not None:
        return Repo(doc.name, "url", doc.url)
    assert doc.path is not None  # the model's rule
    repo = Repo(doc.name, "path", str((root / doc.path).resolve()))
    for arch in arches:
        location = repo.location_for(arch)
        if not (Path(location) / "repodata" / "repomd.xml").is_file():
            raise InputError(file, f"base.repos[{index}].path",
                             f"{location} is not a yum repository (no repodata)")
    return repo
