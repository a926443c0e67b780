"""The signed update index: which commit is newest on a ref, and the delta files to it.

`python -m builder deltas` publishes, per ref, beside the repository:

    updates/REF/index.json        ref, to_commit, to_version, files: [{file, from_commit,
                                  to_commit, bytes, sha256, ...}] (one per offline delta file)
    updates/REF/index.json.sig    a detached GPG signature of index.json
    updates/REF/FROM-TO.delta     the delta files (ostree's single-file static deltas)

The updater believes an index only when its signature verifies with the keys its ostree
remote verifies commits with; gpg runs in a throwaway home holding just those keys.
"""

from __future__ import annotations

import http.client
import re
import shutil
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.core.bounded_json import BadDocument, Doc, parse
from builder.core.errors import BuildError
from builder.core.runner import Runner
from builder.updater.fetch import Patience, request

INDEX = "index.json"
SIGNATURE = "index.json.sig"
INDEX_FORMAT = "microshift-edge-builder/offline-deltas/v1"
MAX_METADATA = 1024 * 1024   # an index is a few KiB; refuse to read an endless one
CHECKSUM = re.compile(r"^[0-9a-f]{64}$")
FILE_NAME = re.compile(r"^(?:[0-9a-f]{64}|empty)-[0-9a-f]{64}\.delta$")


class UpdateRefused(BuildError):
    """Published metadata or a delta file the device must not trust: nothing is staged."""


@dataclass(frozen=True)
class DeltaFile:
    file: str
    from_commit: str | None
    to_commit: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Index:
    ref: str
    to_commit: str
    to_version: str | None
    files: tuple[DeltaFile, ...]

    def delta_from(self, commit: str) -> DeltaFile | None:
        return next((f for f in self.files if f.from_commit == commit), None)


@dataclass(frozen=True)
class Fetched:
    data: bytes
    url: str


def fetch_small(url: str, patience: Patience) -> Fetched | None:
    """GET a metadata file whole; None when the server has no such file (404)."""
    if url.startswith("file://"):
        return _read_local(url)
    try:
        with request(url, patience) as response:
            if response.status == 404:
                return None
            if response.status != 200:
                raise BuildError(f"GET {url}: HTTP {response.status} {response.reason}")
            data = response.read_all(MAX_METADATA)
    except (OSError, http.client.HTTPException) as exc:
        raise BuildError(f"GET {url}: {exc}") from exc
    if len(data) > MAX_METADATA:
        raise UpdateRefused(f"{url} is larger than {MAX_METADATA} bytes: not an update index")
    return Fetched(data, url)


def _read_local(url: str) -> Fetched | None:
    """A metadata file on a USB stick (updates_url: file:///...): a missing one is a 404."""
    path = Path(urllib.request.url2pathname(url[len("file://"):]))
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_METADATA + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BuildError(f"read {path}: {exc.strerror or exc}") from exc
    if len(data) > MAX_METADATA:
        raise UpdateRefused(f"{url} is larger than {MAX_METADATA} bytes: not an update index")
    return Fetched(data, url)


def verify_signature(runner: Runner, data: bytes, signature: bytes, keyrings: list[Path],
                     what: str, *, scratch: Path | None = None) -> str:
    """The fingerprint of the key whose good signature `signature` is over `data`. The
    throwaway GnuPG home is made under `scratch` (the updater's own temporary directory,
    emptied at every run's start, so that a killed run leaves nothing for long); gpg runs
    with --no-autostart: verifying needs no agent, and an agent's sockets are what kept
    homes from being removed."""
    if not keyrings:
        raise UpdateRefused(f"{what}: no keys to verify its signature with")
    home = Path(tempfile.mkdtemp(prefix="microshift-update-gpg-", dir=scratch))
    try:
        home.chmod(0o700)
        (home / "data").write_bytes(data)
        (home / "data.sig").write_bytes(signature)
        gpg = ["gpg", "--homedir", str(home), "--batch", "--no-tty", "--quiet",
               "--no-autostart"]
        for keyring in keyrings:
            runner.run([*gpg, "--import", str(keyring)], check=False)
        proc = runner.run([*gpg, "--status-fd", "1", "--verify", str(home / "data.sig"),
                           str(home / "data")], check=False)
    finally:
        runner.run(["gpgconf", "--homedir", str(home), "--kill", "all"], check=False)
        remove_tree(home)
    status = proc.stdout.decode(errors="replace").splitlines()
    valid = [line.split()[2] for line in status if line.startswith("[GNUPG:] VALIDSIG ")]
    bad = [line for line in status if line.split()[1:2] and line.split()[1] in
           ("BADSIG", "ERRSIG", "EXPKEYSIG", "REVKEYSIG", "EXPSIG", "NO_PUBKEY")]
    if proc.returncode != 0 or not valid or bad:
        reason = bad[0].split(" ", 2)[1] if bad else "no good signature"
        raise UpdateRefused(f"{what}: signature does not verify with the remote's keys "
                            f"({reason})", hint="the device keeps its commit; publish the "
                            "index signed with the key the devices trust")
    return valid[0]


def remove_tree(path: Path) -> None:
    """rmtree that tries again once: an agent that was still going away may have removed
    (or made) a socket in it while the first pass ran."""
    for _ in range(2):
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            return
        time.sleep(0.2)


def load_document(data: bytes, fmt: str, what: str) -> Doc:
    """A published JSON document of the given `format`, or refused naming what it is not."""
    try:
        doc = Doc(parse(data, what, limit=MAX_METADATA), what)
        doc.equals("format", fmt, fmt)
    except BadDocument as exc:
        raise UpdateRefused(str(exc)) from None
    return doc


def index_target(doc: Doc, ref: str, what: str, target: str) -> tuple[str, str | None]:
    """(to_commit, to_version) of a signed index that lists the device's `ref`; `target`
    says what to_commit names (a commit checksum, a manifest digest's hex)."""
    listed = doc.text("ref", max_length=1024)
    if listed != ref:
        raise UpdateRefused(f"{what}: lists ref {listed!r}, the device tracks {ref!r}")
    to_commit = doc.text("to_commit", pattern=CHECKSUM, allowed=target)
    version = doc.text("to_version", required=False, max_length=256,
                       allowed="a string or null")
    return to_commit, version


def parse_index(data: bytes, ref: str, what: str) -> Index:
    doc = load_document(data, INDEX_FORMAT, what)
    try:
        to_commit, version = index_target(doc, ref, what,
                                          "a commit checksum (64 hex digits)")
        files = doc.array("files")
        return Index(ref, to_commit, version,
                     tuple(_delta_file(entry, to_commit, what, n)
                           for n, entry in enumerate(files)))
    except BadDocument as exc:
        raise UpdateRefused(str(exc)) from None


def _delta_file(entry: Any, to_commit: str, what: str, number: int) -> DeltaFile:
    doc = Doc(entry, what, f"files[{number}]")
    name = doc.text("file", pattern=FILE_NAME, allowed="FROM-TO.delta")
    source = doc.text("from_commit", required=False, pattern=CHECKSUM,
                      allowed="a commit checksum or null")
    doc.equals("to_commit", to_commit, f"the index's to_commit {to_commit[:12]}")
    size = doc.integer("bytes", 1, 2 ** 50)
    digest = doc.text("sha256", pattern=CHECKSUM, allowed="a sha256 (64 hex digits)")
    expected = f"{source or 'empty'}-{to_commit}.delta"
    if name != expected:
        raise UpdateRefused(f"{what}: file {name!r} should be named {expected}")
    return DeltaFile(name, source, to_commit, size, digest)
