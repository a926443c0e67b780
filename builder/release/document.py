"""The model of release.yaml as a document: its shape, types and value rules.

`builder.release.model.load_release` validates a file against `ReleaseDocument`, then checks
what a schema cannot (files and repositories exist, sha256 of a local payload) and builds the
frozen `Release` the stages read. `schemas/release.schema.json` is generated from this model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, get_args

from pydantic import BeforeValidator, Field, WithJsonSchema, model_validator

from builder.core.models import Model, key_text, refuse
from builder.release.catalog import BY_KEY

RPM_VERSION = r"^[A-Za-z0-9._+~^]+$"
RPM_RULE = "letters, digits and . _ + ~ ^ (no '-', rpm rule)"
# REPOSITORY@sha256:DIGEST, optionally with a tag in between (repo:tag@sha256:...).
IMAGE_REF = (r"^(?P<repo>[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?"
             r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
             r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?@sha256:(?P<digest>[0-9a-f]{64})$")
IMAGE_REF_RE = re.compile(IMAGE_REF)
IMAGE_REF_PORTABLE = re.sub(r"\(\?P<\w+>", "(", IMAGE_REF)  # ECMA-262 has no (?P<name>
SOURCE = r"^(?:sample|(?:oci|oci-archive|docker-archive|dir):.+)$"
URL = r"^(?:https?|file)://"
# A payload is downloaded over HTTP(S); a local file is `path:`.
HTTP_URL = r"^https?://"
SHA256 = r"^[0-9a-f]{64}$"
MODE = r"^0?[0-7]{3}$"
# A normalized absolute path under the read-only, versioned part of an ostree image: /etc
# holds configuration (specs/sources/), /var and /usr/local are not part of a commit.
INSTALL = (r"^/usr/(?:bin|sbin|libexec|lib|lib64|share)"
           r"(?:/(?:[^/.][^/]*|\.[^/.][^/]*|\.\.[^/]+))+$")  # no "." or ".." part
INSTALL_RULE = ("a normalized absolute path under /usr/bin/, /usr/sbin/, /usr/libexec/, "
                "/usr/lib/, /usr/lib64/, /usr/share/")
# osbuild/images pkg/ostree verifyRef: slash-separated words; `{arch}`/`{image}` allowed.
REF_TEMPLATE = r"^(?:[\w{}][-._\w{}]*/)*[\w{}][-._\w{}]*$"
BINARY = "/usr/bin/microshift"

SamplePayload = Literal["microshift", "microshift-never-ready", "microshift-etcd",
                        "microshift-cleanup-data", "microshift-sos-report"]
SAMPLE_PAYLOADS: tuple[str, ...] = get_args(SamplePayload)
# The keys of builder.release.catalog, spelled out so that type checkers see them.
ComponentKey = Literal["core", "networking-ovnk", "networking-bridge", "storage-topolvm",
                       "multus", "greenboot", "update", "selinux", "release-info"]
Architecture = Literal["x86_64", "aarch64"]
ARCHITECTURES: tuple[str, ...] = get_args(Architecture)
if get_args(ComponentKey) != tuple(BY_KEY):  # pragma: no cover - a catalog edit without this
    raise ImportError("builder.release.document.ComponentKey differs from the catalog")


def _release_text(value: Any) -> Any:
    """`release: 1` and `release: "1"` are the same; anything else is named as it is."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise refuse(f"expected a string or an integer, got {value!r}"[:120])
    return value


def _image_form(value: Any) -> Any:
    return {"ref": value} if isinstance(value, str) else value


ReleaseText = Annotated[
    str, BeforeValidator(_release_text), Field(pattern=RPM_VERSION, description=RPM_RULE),
    WithJsonSchema({"anyOf": [{"type": "string", "pattern": RPM_VERSION},
                              {"type": "integer", "minimum": 0}], "description": RPM_RULE})]


class Image(Model):
    ref: str = Field(description="REPOSITORY[:TAG]@sha256:<64 hex digits>",
                     pattern=IMAGE_REF_PORTABLE)
    source: str | None = Field(None, pattern=SOURCE, description=(
        "sample, or one of oci:PATH, oci-archive:PATH, docker-archive:PATH, dir:PATH"))

    @model_validator(mode="before")
    @classmethod
    def _pinned(cls, data: Any) -> Any:
        ref = data.get("ref") if isinstance(data, dict) else None
        if isinstance(ref, str) and "@sha256:" not in ref:
            raise refuse(f"image {ref!r} is not pinned by digest; allowed: "
                         "REPOSITORY@sha256:<64 hex digits> (find it with `skopeo inspect "
                         "docker://IMAGE`)", at="ref")
        return data


# `name: REF` is short for `name: {ref: REF}`.
ImageSpec = Annotated[Image, BeforeValidator(_image_form), WithJsonSchema({"anyOf": [
    {"type": "string", "pattern": IMAGE_REF_PORTABLE,
     "description": "REPOSITORY[:TAG]@sha256:<64 hex digits>"},
    Image.model_json_schema()]})]


class _Sources(Model):
    """Where a payload file comes from: path, url (with sha256) or sample."""

    path: str | None = Field(None, min_length=1, description="a file, relative to release.yaml")
    url: str | None = Field(None, pattern=HTTP_URL, description=(
        "an http(s):// URL (a local file is path:)"))
    sample: SamplePayload | None = None
    sha256: str | None = Field(None, pattern=SHA256, description="64 lowercase hex digits")

    def _check_one_source(self) -> None:
        given = [k for k in ("path", "url", "sample") if getattr(self, k) is not None]
        if len(given) != 1:
            raise refuse("give exactly one of path, url (with sha256) or sample")
        if self.url is not None and self.sha256 is None:
            raise refuse("is required with url: downloads are verified", at="sha256")


class PayloadSource(_Sources):
    """One of path, url (with sha256) or sample."""

    @model_validator(mode="after")
    def _one_source(self) -> PayloadSource:
        self._check_one_source()
        return self


class PayloadFile(PayloadSource):
    install: str = Field(pattern=INSTALL, description=INSTALL_RULE)
    mode: str = Field("0755", pattern=MODE, description=(
        'octal permission bits as a quoted string, e.g. "0755"'))

    @model_validator(mode="after")
    def _readable(self) -> PayloadFile:
        if not int(self.mode, 8) & 0o400:
            raise refuse(f"{self.mode!r} is not allowed; allowed: a mode the owner can "
                         "read (e.g. 0755 or 0644)", at="mode")
        return self


class _Form(_Sources):
    """The single-file form (a source for /usr/bin/microshift) or `files:`."""

    files: list[PayloadFile] | None = Field(None, min_length=1, description=(
        "the release's files, at least the microshift binary"))

    def _check_form(self) -> None:
        sources = [k for k in ("path", "url", "sample", "sha256") if getattr(self, k) is not None]
        if self.files is None:
            self._check_one_source()
            return
        if sources:
            raise refuse("give either files: or one source (path, url or sample), not both",
                         at=sources[0])
        seen: dict[str, int] = {}
        for index, entry in enumerate(self.files):
            if entry.install in seen:
                raise refuse(f"{entry.install} is already installed by "
                             f"files[{seen[entry.install]}]; allowed: one file a path",
                             at=f"files[{index}].install")
            seen[entry.install] = index
        if BINARY not in seen:
            raise refuse(f"has no entry with install: {BINARY}; allowed: a payload "
                         "that ships the microshift binary", at="files")


class ArchPayload(_Form):
    """One architecture's payload: the single-file form or `files:`."""

    @model_validator(mode="after")
    def _one_form(self) -> ArchPayload:
        self._check_form()
        return self


_PER_ARCH = "the {arch} payload: one source (path, url with sha256, or sample) or files:"


class Payload(_Form):
    """One payload for every architecture, or one per architecture (`x86_64:`, `aarch64:`).

    Either payload is the single-file form (a source for /usr/bin/microshift) or `files:`."""

    x86_64: ArchPayload | None = Field(None, description=_PER_ARCH.format(arch="x86_64"))
    aarch64: ArchPayload | None = Field(None, description=_PER_ARCH.format(arch="aarch64"))

    @model_validator(mode="after")
    def _one_form(self) -> Payload:
        arches = self.per_arch()
        if not arches:
            self._check_form()
            return self
        shared = [k for k in ("files", "path", "url", "sample", "sha256")
                  if getattr(self, k) is not None]
        if shared:
            raise refuse(f"give either one payload for every architecture ({shared[0]}: ...) "
                         f"or one per architecture ({', '.join(arches)}: ...), not both",
                         at=shared[0])
        return self

    def per_arch(self) -> dict[str, ArchPayload]:
        """The per-architecture form's entries by architecture ({} for the single form)."""
        return {arch: form for arch in ARCHITECTURES
                if (form := getattr(self, arch)) is not None}


if set(ARCHITECTURES) - set(Payload.model_fields):  # pragma: no cover - an architecture added
    raise ImportError("builder.release.document.Payload has no field for every architecture")


# An image's logical name also names files and directories of the build (its OCI layout):
# no '/', no leading '.', so never `..`.
IMAGE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
ImageName = Annotated[str, Field(pattern=IMAGE_NAME)]


class Component(Model):
    payload: Payload | None = None
    images: dict[ImageName, ImageSpec] | None = Field(None, description=(
        "image names: letters, digits, '.', '_' and '-', starting with a letter or digit"))
    data_backup: Literal["microshift", "greenboot"] | None = Field(None, description=(
        "microshift (the binary backs up its data, 4.14+) or greenboot (this project's "
        "scripts)"))


class Repo(Model):
    name: str = Field(min_length=1, description="a repository name")
    sample: bool = False
    url: str | None = Field(None, pattern=URL, description="an http(s):// or file:// URL")
    path: str | None = Field(None, min_length=1, description=(
        "a yum repository directory, relative to release.yaml"))

    @model_validator(mode="after")
    def _one_location(self) -> Repo:
        if not self.sample and self.url is None and self.path is None:
            raise refuse("give one of url, path, or sample: true", at="url")
        return self


class Base(Model):
    repos: list[Repo]


class OstreeBase(Model):
    sample: bool = False
    repo: str | None = Field(None, min_length=1, description=(
        "an ostree repository directory or an http(s):// URL"))
    ref: str | None = Field(None, pattern=REF_TEMPLATE, description=(
        "an ostree ref such as rhel/9/x86_64/edge"))
    gpg_key: str | None = Field(None, min_length=1, description=(
        "a public key file to verify the base commit with"))

    @model_validator(mode="after")
    def _where(self) -> OstreeBase:
        if self.sample:
            return self
        if self.repo is None:
            raise refuse("give `sample: true` or `repo: PATH_OR_URL` with `ref: REF`", at="repo")
        if self.ref is None:
            raise refuse("is required", at="ref")
        return self


class Ostree(Model):
    ref: str | None = Field(None, pattern=REF_TEMPLATE, description=(
        "slash-separated words, optionally with {arch} and {image}, e.g. rhel/9/{arch}/edge"))
    base: OstreeBase | None = None
    deltas_from: int = Field(3, ge=0, le=50, description="an integer from 0 to 50")


# rpmlint's check names: statically-linked-binary, missing-PT_GNU_STACK-section, ...
RPMLINT_CHECK = r"^[A-Za-z0-9_%-]+$"
# The reason is shown in the build output: at least one character that is not a blank.
WHY = r"[^ \t\r\n]"


class RpmlintAcceptance(Model):
    """One rpmlint finding on one file of the release's own payload, accepted with a reason."""

    check: str = Field(pattern=RPMLINT_CHECK, description=(
        "an rpmlint check name as rpmlint prints it, e.g. statically-linked-binary "
        "(letters, digits, '-', '_' and '%')"))
    path: str = Field(min_length=1, description=(
        "the install path of a file of components.core.payload, e.g. /usr/bin/microshift"))
    why: str = Field(pattern=WHY, description=(
        "why the finding is justified for this file (shown in the build output)"))


class Rpmlint(Model):
    accept: list[RpmlintAcceptance] = Field([], description=(
        "rpmlint findings accepted for the payload's files, each with its reason"))


class ReleaseDocument(Model):
    """release.yaml: what to build, validated before any work."""

    model_config = {"title": "MicroShift edge builder release (release.yaml)"}

    version: str = Field(pattern=RPM_VERSION, description=RPM_RULE)
    release: ReleaseText
    architectures: list[Architecture] = Field(
        ["x86_64"], min_length=1, description="x86_64, aarch64")
    source_date_epoch: int = Field(ge=315532800, lt=2**32, description=(
        "a Unix time from 1980-01-01 to 2106 (zip and rpm limits)"))
    base: Base | None = None
    components: dict[ComponentKey, Component | None]  # `selinux:` is `selinux: {}`
    ostree: Ostree | None = None
    rpmlint: Rpmlint | None = None

    @model_validator(mode="after")
    def _components(self) -> ReleaseDocument:
        for key, maybe in self.components.items():
            comp = maybe or Component()
            if comp.payload is not None and key != "core":
                raise refuse("only core has a payload (the microshift binaries); components "
                             "ship their files from specs/sources/", at=f"components.{key}.payload")
            if comp.data_backup is not None and key != "core":
                raise refuse("only core has data_backup", at=f"components.{key}.data_backup")
        if "core" not in self.components:
            raise refuse("is required: every release ships microshift-core",
                         at="components.core")
        payload = (self.components["core"] or Component()).payload
        if payload is None:
            raise refuse("is required for core (the microshift binary)",
                         at="components.core.payload")
        _every_architecture(payload, self.architectures)
        if "selinux" not in self.components:
            raise refuse("is required: microshift-core requires microshift-selinux, as RHEL "
                         "for Edge devices run SELinux enforcing; add `selinux: {}` under "
                         "components", at="components.selinux")
        _one_image_per_name({str(k): v or Component() for k, v in self.components.items()})
        _payload_acceptances(self.rpmlint or Rpmlint(), payload_installs(payload,
                                                                         self.architectures))
        return self


def _one_image_per_name(components: Mapping[str, Component]) -> None:
    """A logical image name means one image: release-ARCH.json lists images by name."""
    seen: dict[str, tuple[str, str]] = {}
    for key, comp in components.items():
        for name, image in (comp.images or {}).items():
            owner, ref = seen.setdefault(name, (key, image.ref))
            if ref != image.ref:
                raise refuse(f"names another image than components.{owner}.images."
                             f"{key_text(name)} ({ref}); allowed: one image per name across "
                             "the release", at=f"components.{key}.images.{key_text(name)}")


def _every_architecture(payload: Payload, architectures: list[Architecture]) -> None:
    """The per-architecture form names the payload of every architecture the release builds
    (entries for other architectures are allowed, and unused)."""
    given = payload.per_arch()
    missing = [arch for arch in architectures if arch not in given]
    if given and missing:
        raise refuse(f"is required: architectures lists {missing[0]} and the payload is given "
                     "per architecture; allowed: an entry for each of "
                     f"{', '.join(architectures)}, or one payload (path, url, sample or "
                     "files) for every architecture",
                     at=f"components.core.payload.{missing[0]}")


def payload_installs(payload: Payload, architectures: list[Architecture]) -> list[str]:
    """The install paths of the payload's files for these architectures, in order."""
    forms: list[Payload | ArchPayload] = [payload]
    if payload.per_arch():
        forms = [form for arch, form in payload.per_arch().items() if arch in architectures]
    return list(dict.fromkeys(path for form in forms for path in (
        [entry.install for entry in form.files] if form.files else [BINARY])))


def _payload_acceptances(rpmlint: Rpmlint, installs: list[str]) -> None:
    """An accepted rpmlint finding is about a file of the release's payload, once."""
    seen: dict[tuple[str, str], int] = {}
    for index, entry in enumerate(rpmlint.accept):
        at = f"rpmlint.accept[{index}]"
        if entry.path not in installs:
            raise refuse(f"{entry.path!r} is not a file of the release's payload; allowed: "
                         f"{', '.join(installs)} (components.core.payload; the project's own "
                         "files are filtered in specs/rpmlintrc)", at=f"{at}.path")
        first = seen.setdefault((entry.check, entry.path), index)
        if first != index:
            raise refuse(f"accepts {entry.check} on {entry.path} again (rpmlint.accept"
                         f"[{first}]); allowed: one entry per check and path", at=at)
