"""The core payload of release.yaml: the files a MicroShift release ships, each with its source.

A real MicroShift release installs several files from its build: `/usr/bin/microshift`, the
`/usr/bin/microshift-etcd` it starts etcd from, and the scripts `microshift-cleanup-data` and
`microshift-sos-report` (upstream packaging/rpm/microshift.spec, %install). Two forms:

    payload: {sample: microshift}                        # one file: /usr/bin/microshift
    payload:
      files:
        - {install: /usr/bin/microshift, url: https://..., sha256: <64 hex>}
        - {install: /usr/bin/microshift-etcd, path: build/microshift-etcd, mode: "0755"}

Each file takes one source, the same three as the single form: `path` (optionally with
`sha256`), `url` with `sha256` (downloaded once, verified, cached), or `sample` (a generated
SAMPLE stand-in). Either form serves every architecture of the release, or the payload
names one per architecture, each in either form (a real binary is built for one machine):

    payload:
      x86_64: {url: https://.../microshift-x86_64, sha256: <64 hex>}
      aarch64: {files: [{install: /usr/bin/microshift, url: ..., sha256: ...}, ...]}

The shape is `builder.release.document.Payload`; `release_payload` checks what a schema
cannot (a local file exists and has its sha256).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import InputError
from builder.core.steps import file_digest
from builder.release import document
from builder.release.document import BINARY, SAMPLE_PAYLOADS

__all__ = ["BINARY", "SAMPLE_PAYLOADS", "ArchPayloads", "Payload", "PayloadFile",
           "release_payload"]

@dataclass(frozen=True)
class Payload:
    """Where one payload file comes from: a local path, a URL with sha256, or a sample."""

    kind: str      # "path" | "url" | "sample"
    location: str  # absolute path, URL, or sample name
    sha256: str | None
    field: str  # where release.yaml names it, e.g. components.core.payload.files[0]

    @property
    def is_sample(self) -> bool:
        return self.kind == "sample"


@dataclass(frozen=True)
class PayloadFile:
    """One file of the payload: where it is installed, with which mode, from which source."""

    install: str   # absolute path on the device, e.g. /usr/bin/microshift-etcd
    mode: int      # permission bits, e.g. 0o755
    source: Payload

    @property
    def name(self) -> str:
        """The file's name in the RPM's SOURCES (unique: install paths are unique)."""
        return self.install.strip("/").replace("/", "_")

    @property
    def mode_text(self) -> str:
        return f"{self.mode:04o}"


@dataclass(frozen=True)
class ArchPayloads:
    """A component's payload files for each architecture of the release: the same `shared`
    files for all of them (release.yaml's single form), or each its own (`by_arch`)."""

    field: str = ""  # where release.yaml names it: components.core.payload
    shared: tuple[PayloadFile, ...] = ()
    by_arch: tuple[tuple[str, tuple[PayloadFile, ...]], ...] = ()

    @property
    def per_arch(self) -> bool:
        return bool(self.by_arch)

    def files_for(self, arch: str) -> tuple[PayloadFile, ...]:
        if not self.by_arch:
            return self.shared
        for name, files in self.by_arch:
            if name == arch:
                return files
        # load_release refuses a release without an entry for one of its architectures.
        raise KeyError(f"{self.field} has no entry for {arch}")

    def field_for(self, arch: str) -> str:
        return f"{self.field}.{arch}" if self.by_arch else self.field


def release_payload(doc: document.Payload, architectures: tuple[str, ...], root: Path,
                    file: str, prefix: str) -> ArchPayloads:
    """The files of a validated payload mapping at `prefix` for the release's architectures;
    checks what a schema cannot. Entries of other architectures are not built, so a path
    there need not exist yet."""
    forms = doc.per_arch()
    if not forms:
        return ArchPayloads(prefix, shared=_files(doc, root, file, prefix))
    return ArchPayloads(prefix, by_arch=tuple(
        (arch, _files(forms[arch], root, file, f"{prefix}.{arch}"))
        for arch in dict.fromkeys(architectures)))


def _files(doc: document.Payload | document.ArchPayload, root: Path, file: str,
           prefix: str) -> tuple[PayloadFile, ...]:
    if doc.files is None:
        return (PayloadFile(BINARY, 0o755, _source(doc, root, file, prefix)),)
    return tuple(PayloadFile(entry.install, int(entry.mode, 8),
                             _source(entry, root, file, f"{prefix}.files[{index}]"))
                 for index, entry in enumerate(doc.files))


def _source(doc: document.Payload | document.ArchPayload | document.PayloadSource, root: Path,
            file: str, prefix: str) -> Payload:
    if doc.sample is not None:
        return Payload("sample", doc.sample, None, prefix)
    if doc.url is not None:
        return Payload("url", doc.url, doc.sha256, prefix)
    assert doc.path is not None  # the model's rule: exactly one source
    location = (root / doc.path).resolve()
    if not location.exists():
        raise InputError(file, f"{prefix}.path", f"payload file {location} does not exist",
                         hint="build it first or fix the path")
    if not location.is_file():
        raise InputError(file, f"{prefix}.path", f"{location} is not a regular file")
    if doc.sha256 is not None and doc.sha256 != file_digest(location):
        raise InputError(file, f"{prefix}.sha256",
                         f"mismatch: {location} has sha256 {file_digest(location)}, "
                         f"release.yaml says {doc.sha256}")
    return Payload("path", str(location), doc.sha256, prefix)

