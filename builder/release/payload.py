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
SAMPLE stand-in). `parse_payload` reads one such mapping; a per-architecture form
(`payload: {x86_64: {...}, aarch64: {...}}`) maps each architecture to the same mapping.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import InputError
from builder.core.schema import Fields
from builder.core.steps import file_digest

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
MODE_RE = re.compile(r"^0?[0-7]{3}$")
BINARY = "/usr/bin/microshift"
# The SAMPLE stand-ins builder.release.samples can generate, by name.
SAMPLE_PAYLOADS = ("microshift", "microshift-etcd", "microshift-cleanup-data",
                   "microshift-sos-report")
# Where payload files may go: the read-only, versioned part of an ostree image. /etc holds
# configuration (specs/sources/), /var and /usr/local are not part of a commit.
INSTALL_PREFIXES = ("/usr/bin/", "/usr/sbin/", "/usr/libexec/", "/usr/lib/", "/usr/lib64/",
                    "/usr/share/")


@dataclass(frozen=True)
class Payload:
    """Where one payload file comes from: a local path, a URL with sha256, or a sample."""

    kind: str      # "path" | "url" | "sample"
    location: str  # absolute path, URL, or sample name
    sha256: str | None = None

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


def parse_payload(fields: Fields, root: Path) -> tuple[PayloadFile, ...]:
    """One payload mapping: the single-file form or `files:`; every error names the field."""
    if fields.has("files"):
        files = _files(fields, root)
        fields.close()
        return files
    source = _source(fields, root)
    fields.close()
    return (PayloadFile(BINARY, 0o755, source),)


def _files(fields: Fields, root: Path) -> tuple[PayloadFile, ...]:
    items = fields.get("files", list, required=True)
    if not items:
        raise fields.error("files", "is empty; list at least the microshift binary")
    files: list[PayloadFile] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(items):
        entry = Fields(fields.file, f"{fields.path('files')}[{index}]", item)
        install = entry.check("install", entry.get("install", str, required=True),
                              _installable, "a normalized absolute path under "
                              + ", ".join(INSTALL_PREFIXES))
        if install in seen:
            raise entry.error("install", f"{install} is already installed by "
                                         f"files[{seen[install]}]; allowed: one file a path")
        seen[install] = index
        mode_text = entry.check("mode", entry.get("mode", str, "0755"), MODE_RE.match,
                                'octal permission bits as a quoted string, e.g. "0755"')
        mode = int(mode_text, 8)
        if not mode & 0o400:
            raise entry.error("mode", f"{mode_text!r} is not allowed; allowed: a mode the "
                                      "owner can read (e.g. 0755 or 0644)")
        files.append(PayloadFile(install, mode, _source(entry, root)))
        entry.close()
    if BINARY not in seen:
        raise fields.error("files", f"has no entry with install: {BINARY}; allowed: a "
                                    "payload that ships the microshift binary")
    return tuple(files)


def _installable(path: str) -> bool:
    return (path.startswith(INSTALL_PREFIXES) and posixpath.normpath(path) == path
            and not path.endswith("/"))


def _source(fields: Fields, root: Path) -> Payload:
    kinds = [k for k in ("path", "url", "sample") if fields.has(k)]
    if len(kinds) != 1:
        raise InputError(fields.file, fields.prefix,
                         "give exactly one of path, url (with sha256) or sample")
    sha = fields.get("sha256", str)
    if sha is not None:
        fields.check("sha256", sha, SHA256_RE.match, "64 lowercase hex digits")
    kind = kinds[0]
    if kind == "sample":
        name = fields.check("sample", fields.get("sample", str), SAMPLE_PAYLOADS.__contains__,
                            ", ".join(SAMPLE_PAYLOADS))
        return Payload("sample", name)
    if kind == "url":
        url = fields.check("url", fields.get("url", str), lambda u: u.startswith(
            ("https://", "http://", "file://")), "an http(s):// or file:// URL")
        if sha is None:
            raise fields.error("sha256", "is required with url: downloads are verified")
        return Payload("url", url, sha)
    location = (root / fields.get("path", str)).resolve()
    if not location.exists():
        raise fields.error("path", f"payload file {location} does not exist",
                           hint="build it first or fix the path")
    if not location.is_file():
        raise fields.error("path", f"{location} is not a regular file")
    if sha is not None and sha != file_digest(location):
        raise fields.error("sha256", f"mismatch: {location} has sha256 {file_digest(location)}, "
                                     f"release.yaml says {sha}")
    return Payload("path", str(location), sha)
