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

import json
import re
import shutil
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.core.errors import BuildError
from builder.core.runner import Runner

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


def fetch_small(url: str, timeout: float) -> Fetched | None:
    """GET a metadata file whole; None when the server has no such file (404)."""
    if url.startswith("file://"):
        return _read_local(url)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            data = response.read(MAX_METADATA + 1)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise BuildError(f"GET {url}: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise BuildError(f"GET {url}: {reason}") from exc
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
                     what: str) -> str:
    """The fingerprint of the key whose good signature `signature` is over `data`."""
    if not keyrings:
        raise UpdateRefused(f"{what}: no keys to verify its signature with")
    home = Path(tempfile.mkdtemp(prefix="microshift-update-gpg-"))
    try:
        home.chmod(0o700)
        (home / "data").write_bytes(data)
        (home / "data.sig").write_bytes(signature)
        gpg = ["gpg", "--homedir", str(home), "--batch", "--no-tty", "--quiet"]
        for keyring in keyrings:
            runner.run([*gpg, "--import", str(keyring)], check=False)
        proc = runner.run([*gpg, "--status-fd", "1", "--verify", str(home / "data.sig"),
                           str(home / "data")], check=False)
    finally:
        runner.run(["gpgconf", "--homedir", str(home), "--kill", "all"], check=False)
        shutil.rmtree(home, ignore_errors=True)
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


def load_document(data: bytes, fmt: str, what: str) -> dict[str, Any]:
    """A published JSON document of the given `format`, or refused naming what it is not."""
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise UpdateRefused(f"{what}: not a JSON document ({exc})") from exc
    if not isinstance(document, dict) or document.get("format") != fmt:
        raise UpdateRefused(f"{what}: format is not {fmt}")
    return document


def parse_index(data: bytes, ref: str, what: str) -> Index:
    document = load_document(data, INDEX_FORMAT, what)
    if document.get("ref") != ref:
        raise UpdateRefused(f"{what}: lists ref {document.get('ref')!r}, the device tracks "
                            f"{ref!r}")
    to_commit = document.get("to_commit")
    if not isinstance(to_commit, str) or not CHECKSUM.match(to_commit):
        raise UpdateRefused(f"{what}: to_commit is not a commit checksum")
    files = document.get("files")
    if not isinstance(files, list):
        raise UpdateRefused(f"{what}: files is not a list")
    version = document.get("to_version")
    return Index(ref, to_commit, version if isinstance(version, str) else None,
                 tuple(_delta_file(entry, to_commit, what) for entry in files))


def _delta_file(entry: Any, to_commit: str, what: str) -> DeltaFile:
    ok = isinstance(entry, dict) and isinstance(entry.get("file"), str) \
        and FILE_NAME.match(entry["file"]) is not None and entry.get("to_commit") == to_commit \
        and (entry.get("from_commit") is None or (isinstance(entry.get("from_commit"), str)
                                                   and CHECKSUM.match(entry["from_commit"])))\
        and isinstance(entry.get("bytes"), int) and not isinstance(entry.get("bytes"), bool) \
        and entry["bytes"] > 0 and isinstance(entry.get("sha256"), str) \
        and CHECKSUM.match(entry["sha256"]) is not None
    if not ok:
        raise UpdateRefused(f"{what}: a files entry is not a delta file to {to_commit[:12]} "
                            "with file, from_commit, to_commit, bytes and sha256")
    expected = f"{entry['from_commit'] or 'empty'}-{to_commit}.delta"
    if entry["file"] != expected:
        raise UpdateRefused(f"{what}: file {entry['file']!r} should be named {expected}")
    return DeltaFile(entry["file"], entry["from_commit"], to_commit, entry["bytes"],
                     entry["sha256"])
