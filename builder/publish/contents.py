"""What a commit holds, read from the commit itself: its RPMs and its embedded images.

- RPMs: compose keeps the rpm database in the tree (/usr/lib/sysimage/rpm/rpmdb.sqlite, as
  rpm-ostree does; RHEL for Edge commits have it in /usr/share/rpm), so the packages, their
  versions and licenses are read with `rpm --dbpath` from a copy of that database.
- Images: the read-only image store in /usr/share/containers/storage lists every embedded
  image with its names and manifest digest (overlay-images/images.json).

Reading the commit rather than metadata recorded at compose time describes every commit the
same way: ones composed here, ones imported from osbuild-composer (`composer compose`) and
the base commits they start from. The cost is one copy of the rpm database (a few MB).
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.core.errors import BuildError, ToolError
from builder.core.ostree import Repo

RPMDB_DIRS = ("/usr/lib/sysimage/rpm", "/usr/share/rpm", "/var/lib/rpm")
RPMDB_FILES = ("rpmdb.sqlite", "Packages", "Packages.db")
IMAGES_JSON = "/usr/share/containers/storage/overlay-images/images.json"
PAYLOAD_PATH = "/usr/bin/microshift"  # always described; a release names its other files
QUERY_FIELDS = ("NAME", "EPOCHNUM", "VERSION", "RELEASE", "ARCH", "LICENSE", "VENDOR",
                "SOURCERPM", "URL", "SUMMARY")
QUERY_FORMAT = "\\t".join(f"%{{{name}}}" for name in QUERY_FIELDS) + "\\n"
NONE = "(none)"
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
SHA256_ALGO = "8"  # rpm's PGPHASHALGO_SHA256, the default file digest since rpm 4.14


@dataclass(frozen=True)
class InstalledPackage:
    name: str
    epoch: int
    version: str
    release: str
    arch: str
    license: str
    vendor: str | None
    source_rpm: str | None
    url: str | None
    summary: str | None

    @property
    def evr(self) -> str:
        return f"{self.epoch}:{self.version}-{self.release}" if self.epoch \
            else f"{self.version}-{self.release}"

    @property
    def nevra(self) -> str:
        return f"{self.name}-{self.evr}.{self.arch}"


@dataclass(frozen=True)
class StoredImage:
    """An image of the commit's read-only store: its repository (name without tag or digest)."""

    repository: str
    digest: str       # the digest it is pinned by (a manifest list's, for a multi-arch image)
    tag: str | None
    names: tuple[str, ...]
    # The image actually stored, for the commit's architecture: the manifest's digest
    # (containers/storage's big-data "manifest"); the pinned digest when it is that image.
    instance_digest: str = ""

    @property
    def content(self) -> str:
        return self.instance_digest or self.digest


@dataclass(frozen=True)
class InstalledFile:
    """A file of the MicroShift payload: which package installs it, and its sha256."""

    path: str
    package: str
    sha256: str | None


@dataclass(frozen=True)
class CommitContents:
    commit: str
    version: str | None
    timestamp: int
    packages: tuple[InstalledPackage, ...]
    images: tuple[StoredImage, ...]
    payload: tuple[InstalledFile, ...]  # those of the asked paths that a package installs
    rpmdb: str | None = None    # where the rpm database is; None: the commit has none


def read_contents(repo: Repo, commit: str,
                  payload_paths: tuple[str, ...] = (PAYLOAD_PATH,)) -> CommitContents:
    """Everything `sbom` and `diff` need to know about one commit; `payload_paths`: the
    files of the MicroShift payload to describe (the release's `payload.files`)."""
    packages: tuple[InstalledPackage, ...] = ()
    payload: tuple[InstalledFile, ...] = ()
    with tempfile.TemporaryDirectory(prefix="rpmdb-") as scratch:
        rpmdb = _copy_rpmdb(repo, commit, Path(scratch))
        if rpmdb is not None:
            try:
                packages = _query_packages(repo, Path(scratch), commit)
            except ToolError as exc:
                reason = exc.stderr.strip().splitlines()[-1] if exc.stderr.strip() else ""
                raise BuildError(f"commit {commit[:12]}: rpm cannot read its rpm database "
                                 f"{rpmdb}: {reason}",
                                 hint="the rpm on this machine must read the database format "
                                      "of the commit (sqlite since rpm 4.16)") from exc
            payload = _payload(repo, Path(scratch), payload_paths)
    return CommitContents(commit=commit, version=repo.metadata(commit, "version"),
                          timestamp=repo.timestamp(commit), packages=packages,
                          images=stored_images(repo.cat(commit, IMAGES_JSON), commit),
                          payload=payload, rpmdb=rpmdb)


def package_files(repo: Repo, commit: str) -> dict[str, str]:
    """Every path an RPM package of the commit installs (as installed: /etc/..., no leading
    slash), with the package's name; empty for a commit without an rpm database."""
    owners: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="rpmdb-") as scratch:
        if _copy_rpmdb(repo, commit, Path(scratch)) is None:
            return owners
        text = repo.runner.output(["rpm", "--dbpath", scratch, "-qa", "--qf",
                                   "[%{=NAME}\\t%{FILENAMES}\\n]"])
    for line in text.splitlines():
        name, _, path = line.partition("\t")
        if path.startswith("/") and name != "gpg-pubkey":
            owners.setdefault(path.lstrip("/"), name)
    return owners


def _copy_rpmdb(repo: Repo, commit: str, scratch: Path) -> str | None:
    """Copy the commit's rpm database into `scratch` (rpm writes lock and journal files
    beside a database even to read it, which must never touch the repository); where it
    was, or None for a commit without one (a bare tree committed by hand)."""
    for directory in RPMDB_DIRS:
        entries = repo.list_dir(commit, directory)
        if not entries or not any(name in RPMDB_FILES for kind, name in entries if kind == "-"):
            continue
        for kind, name in entries:
            if kind == "-":
                data = repo.cat(commit, f"{directory}/{name}")
                if data is not None:
                    (scratch / name).write_bytes(data)
        return directory
    return None


def _query_packages(repo: Repo, dbpath: Path, commit: str) -> tuple[InstalledPackage, ...]:
    text = repo.runner.output(["rpm", "--dbpath", str(dbpath), "-qa", "--qf", QUERY_FORMAT])
    packages = []
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) != len(QUERY_FIELDS):
            raise BuildError(f"commit {commit[:12]}: unexpected rpm query output {line!r}")
        name, epoch, version, release, arch, license_, vendor, source, url, summary = fields
        if name == "gpg-pubkey":  # imported signing keys, not software
            continue
        packages.append(InstalledPackage(
            name=name, epoch=int(epoch or 0), version=version, release=release, arch=arch,
            license=license_ if license_ != NONE else "", vendor=_value(vendor),
            source_rpm=_value(source), url=_value(url), summary=_value(summary)))
    return tuple(sorted(packages, key=lambda p: (p.name, p.arch, p.evr)))


def _value(text: str) -> str | None:
    return None if text in ("", NONE) else text


def _payload(repo: Repo, dbpath: Path, paths: tuple[str, ...]) -> tuple[InstalledFile, ...]:
    """Each path's owning package and its sha256 from that package's header (rpm records a
    digest of every file it installs); paths no package installs are left out."""
    digests: dict[str, tuple[str, dict[str, str]]] = {}
    found = []
    for path in dict.fromkeys((PAYLOAD_PATH, *paths)):
        owner = repo.runner.run(["rpm", "--dbpath", str(dbpath), "-qf", path,
                                 "--qf", "%{NAME}\\n"], check=False)
        names = owner.stdout.decode().split()
        if owner.returncode != 0 or len(names) != 1:
            continue
        if names[0] not in digests:
            listing = repo.runner.output(
                ["rpm", "--dbpath", str(dbpath), "-q", names[0], "--qf",
                 "%{FILEDIGESTALGO}\\n[%{FILENAMES}\\t%{FILEDIGESTS}\\n]"])
            algo, *lines = listing.splitlines()
            digests[names[0]] = (algo, dict(line.split("\t", 1) for line in lines
                                            if "\t" in line))
        algo, by_path = digests[names[0]]
        digest = by_path.get(path) or None
        found.append(InstalledFile(path, names[0], digest if algo == SHA256_ALGO else None))
    return tuple(found)


def stored_images(images_json: bytes | None, commit: str) -> tuple[StoredImage, ...]:
    """The images of a containers/storage images.json (none when the commit has no store)."""
    if images_json is None:
        return ()
    try:
        records: Any = json.loads(images_json)
    except ValueError as exc:
        raise BuildError(f"commit {commit[:12]}: {IMAGES_JSON} is not JSON: {exc}") from exc
    images = []
    for record in records if isinstance(records, list) else []:
        digest = record.get("digest", "")
        if not DIGEST_RE.match(digest):
            continue
        names = tuple(sorted(record.get("names") or ()))
        repository, tag = split_reference(names[0]) if names else (record.get("id", "?"), None)
        stored = (record.get("big-data-digests") or {}).get("manifest", "")
        images.append(StoredImage(repository, digest, tag, names,
                                  stored if DIGEST_RE.match(str(stored)) else ""))
    return tuple(sorted(images, key=lambda i: (i.repository, i.digest)))


def split_reference(reference: str) -> tuple[str, str | None]:
    """(repository, tag) of `repo[:tag][@sha256:...]`; a registry port is not a tag."""
    name = reference.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        return name[:len(name) - len(last)] + last.split(":", 1)[0], last.split(":", 1)[1]
    return name, None
