"""Offline delta files (`FROM-TO.delta`): what a USB stick carries to a device without a link.

An offline file is ostree's own single-file static delta, the "inline" superblock that
`ostree static-delta generate --inline --filename=F` writes and that
`ostree static-delta apply-offline F` applies: the superblock GVariant
`(a{sv}tayay(commit)aya(uayttay)a(yaytt))` whose metadata dictionary also holds every part,
under the part's repository path (`deltas/FR/OM-TO/N`) as a `(yay)` value (compression byte,
then the compressed part). See docs/offline-deltas.md.

The file is written from the delta already generated into the repository: the parts are
copied into the superblock's dictionary, nothing is generated twice. It never contains
fallback entries (objects left for HTTP), which `apply-offline` refuses ("contains nonempty
http fallback entries"). Before anything touches a device a file is checked here, so a bad
one is named with what is wrong: the format, fallback entries, each part's size and sha256
against the superblock (ostree skips that check for inline parts, and would apply a damaged
part until its object checksums fail), the commit against its checksum, the file name
against its content, and that the device holds the delta's source commit.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

from builder.core import gvariant
from builder.core.errors import BuildError
from builder.core.gvariant import FileSlice, GVariantError, Variant
from builder.core.ostree import Repo, delta_dir, signed_by
from builder.core.runner import Runner

SUPERBLOCK_TYPE = "(a{sv}tayay(a{sv}aya(say)sstayay)aya(uayttay)a(yaytt))"
COMMIT_TYPE = "(a{sv}aya(say)sstayay)"
PART_HEADER_TYPE = "a(uayttay)"
FALLBACK_TYPE = "a(yaytt)"
SIGNED_TYPE = "(taya{sv})"
SIGNED_MAGIC = b"OSTSGNDT"
PART_VERSION = 0  # OSTREE_DELTAPART_VERSION of ostree 2022.7: parts newer than this fail
OBJECT_TYPES = {1: "file", 2: "dirtree", 3: "dirmeta", 4: "commit"}
SUFFIX = ".delta"
INDEX = "index.json"
INDEX_FORMAT = "microshift-edge-builder/offline-deltas/v1"
NAME_RE = re.compile(rf"(?P<from>[0-9a-f]{{64}}|empty)-(?P<to>[0-9a-f]{{64}}){re.escape(SUFFIX)}")


class OfflineDeltaError(BuildError):
    """A delta file that cannot be applied, and why."""


@dataclass(frozen=True)
class PartHeader:
    version: int
    checksum: str
    compressed: int
    objects: tuple[tuple[int, str], ...]  # (ostree object type, checksum) in part order


@dataclass(frozen=True)
class Superblock:
    from_commit: str | None
    to_commit: str
    to_version: str | None
    metadata: tuple[tuple[str, Variant], ...]
    commit: memoryview
    parts: tuple[PartHeader, ...]
    fallbacks: tuple[int, ...]  # compressed size of each object left for HTTP
    value: tuple[object, ...]  # the decoded superblock, re-encoded byte for byte

    def relpath(self, target: str) -> str:
        return delta_relpath(self.from_commit, self.to_commit, target)

    def inline_part(self, index: int) -> Variant | None:
        key = self.relpath(str(index))
        return next((v for k, v in self.metadata if k == key and v.type == "(yay)"), None)


@dataclass(frozen=True)
class CheckedFile:
    """What a checked offline file delivers (no views into its mapping survive the check)."""

    from_commit: str | None
    to_commit: str
    to_version: str | None
    parts: int
    sha256: str


@dataclass(frozen=True)
class OfflineFile:
    """One checked offline file, as listed in the per-ref index."""

    file: str
    from_commit: str | None
    from_version: str | None
    to_commit: str
    to_version: str | None
    bytes: int
    sha256: str
    parts: int


def delta_relpath(from_commit: str | None, to_commit: str, target: str) -> str:
    """A delta file's key inside an inline superblock: its path relative to the repo."""
    return (delta_dir(Path(), from_commit, to_commit) / target).as_posix()


def offline_name(from_commit: str | None, to_commit: str) -> str:
    return f"{from_commit or 'empty'}-{to_commit}{SUFFIX}"


# --- reading ------------------------------------------------------------------------------

def parse_superblock(data: memoryview, source: str) -> Superblock:
    """Decode a superblock (plain or ostree-signed); OfflineDeltaError names what is wrong."""
    if bytes(data[:8]) == SIGNED_MAGIC:
        try:
            data = gvariant.children(SIGNED_TYPE, data)[1]
        except GVariantError as exc:
            raise OfflineDeltaError(f"{source}: damaged signed superblock: {exc}") from exc
    try:
        value = cast(tuple[Any, ...], gvariant.decode(SUPERBLOCK_TYPE, data))
        metadata = tuple((str(k), v) for k, v in value[0])
        order = _byteorder(metadata)
        spans = gvariant.children(SUPERBLOCK_TYPE, data)
        headers = cast(list[tuple[Any, ...]], gvariant.decode(PART_HEADER_TYPE, spans[6], order))
        fallbacks = cast(list[tuple[Any, ...]], gvariant.decode(FALLBACK_TYPE, spans[7], order))
    except (GVariantError, UnicodeDecodeError, ValueError) as exc:
        raise OfflineDeltaError(f"{source}: not an ostree static delta ({exc})") from exc
    to_commit = _checksum(value[3], source, "to-commit")
    from_commit = _checksum(value[2], source, "from-commit") if len(value[2]) else None
    commit = spans[4]
    return Superblock(
        from_commit, to_commit, _commit_version(commit), metadata, commit,
        tuple(PartHeader(int(v), _hex(c), int(s), _objects(o, source))
              for v, c, s, _, o in headers),
        tuple(int(s) for _, _, s, _ in fallbacks), value)


def _byteorder(metadata: Sequence[tuple[str, Variant]]) -> str:
    """ostree writes part headers in the generating host's order and records it."""
    for key, variant in metadata:
        if key == "ostree.endianness" and variant.type == "y":
            return "big" if _raw(variant.data) == b"B" else "little"
    return "little"


def _raw(data: bytes | memoryview | FileSlice) -> bytes:
    assert not isinstance(data, FileSlice)  # decoded variants hold bytes; slices are written
    return bytes(data)


def _hex(data: memoryview) -> str:
    return bytes(data).hex()


def _checksum(data: memoryview, source: str, what: str) -> str:
    raw = bytes(data)
    if len(raw) != 32:
        raise OfflineDeltaError(f"{source}: {what} checksum has {len(raw)} bytes, expected 32")
    return raw.hex()


def _objects(data: memoryview, source: str) -> tuple[tuple[int, str], ...]:
    raw = bytes(data)
    if len(raw) % 33:
        raise OfflineDeltaError(f"{source}: a part's object list is damaged")
    return tuple((raw[i], raw[i + 1:i + 33].hex()) for i in range(0, len(raw), 33))


def _commit_version(commit: memoryview) -> str | None:
    try:
        metadata = cast(tuple[Any, ...], gvariant.decode(COMMIT_TYPE, commit))[0]
        for key, variant in metadata:
            if key == "version" and variant.type == "s":
                return str(gvariant.decode("s", _raw(variant.data)))
    except (GVariantError, UnicodeDecodeError):
        return None
    return None


@contextmanager
def mapped(path: Path) -> Iterator[memoryview]:
    """The file's bytes without reading them into memory (offline files are large)."""
    with path.open("rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            yield memoryview(b"")
            return
        mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            yield memoryview(mapping)
        finally:
            # Views still referenced (an exception's frames) keep it open until collected.
            with contextlib.suppress(BufferError):
                mapping.close()


def check_offline_file(path: Path) -> CheckedFile:
    """Everything `apply-offline` needs from the file alone; OfflineDeltaError if it lacks."""
    if not path.is_file():
        raise OfflineDeltaError(f"{path}: no such file")
    with mapped(path) as view:
        superblock = parse_superblock(view, path.name)
        problem = _problem(superblock)
        if problem is not None:
            what, hint = problem
            raise OfflineDeltaError(f"{path.name}: {what}", hint=hint)
        checked = CheckedFile(superblock.from_commit, superblock.to_commit,
                              superblock.to_version, len(superblock.parts),
                              hashlib.sha256(view).hexdigest())
        del superblock  # its views into the mapping must not outlive it
    match = NAME_RE.fullmatch(path.name)
    if match and (match["to"], match["from"]) != (checked.to_commit,
                                                   checked.from_commit or "empty"):
        raise OfflineDeltaError(
            f"{path.name}: the name says {match['from'][:12]} -> {match['to'][:12]} but the "
            f"file holds {(checked.from_commit or 'empty')[:12]} -> "
            f"{checked.to_commit[:12]}", hint="was it renamed? name it FROM-TO.delta")
    return checked


def _problem(superblock: Superblock) -> tuple[str, str] | None:
    """What makes the file unusable, and what to do about it; None when nothing does."""
    if superblock.fallbacks:
        size = sum(superblock.fallbacks)
        return (f"cannot be applied offline: it leaves {len(superblock.fallbacks)} objects "
                f"({size} bytes) to be fetched over HTTP (fallback entries)",
                "regenerate it with `python -m builder deltas`, which writes no fallback "
                "entries")
    if hashlib.sha256(superblock.commit).hexdigest() != superblock.to_commit:
        return (f"the commit inside does not match its checksum {superblock.to_commit[:12]}: "
                "the file is damaged", "copy it again")
    for index, header in enumerate(superblock.parts):
        if header.version > PART_VERSION:
            return (f"part {index} has format version {header.version}; this ostree "
                    f"applies up to {PART_VERSION}", "generate it with the fleet's ostree")
        part = superblock.inline_part(index)
        if part is None:
            return (f"part {index} of {len(superblock.parts)} is not inside the file (a "
                    "repository superblock, not an offline delta)",
                    "use the FROM-TO.delta files from DIR/deltas/REF/")
        data = part.data
        assert isinstance(data, memoryview)
        if len(data) != header.compressed or hashlib.sha256(data).hexdigest() != header.checksum:
            return (f"part {index} is damaged: its sha256 or size differs from the superblock's "
                    f"{header.checksum[:12]} ({header.compressed} bytes)", "copy it again")
    return None


# --- writing ------------------------------------------------------------------------------

def write_offline_file(delta_dir: Path, dest: Path, from_version: str | None) -> OfflineFile:
    """The repository delta in `delta_dir` as one offline file at `dest` (atomically)."""
    superblock_path = delta_dir / "superblock"
    with mapped(superblock_path) as view:
        superblock = parse_superblock(view, str(superblock_path))
        if superblock.fallbacks:
            raise OfflineDeltaError(
                f"{superblock_path}: the delta has {len(superblock.fallbacks)} fallback "
                "entries; an offline file made from it could not be applied",
                hint="delete the delta directory and rerun `deltas` (it sets "
                     "--min-fallback-size=0)")
        parts = []
        for index, header in enumerate(superblock.parts):
            part = delta_dir / str(index)
            if not part.is_file() or part.stat().st_size != header.compressed:
                raise OfflineDeltaError(f"{part}: missing or not {header.compressed} bytes")
            parts.append((superblock.relpath(str(index)), Variant("(yay)", FileSlice(
                part, header.compressed))))
        # Where `generate --inline` puts them: after the generator's keys, before the
        # commit's detached metadata.
        metadata = list(superblock.metadata)
        detached = superblock.relpath("commitmeta")
        at = next((i for i, (key, _) in enumerate(metadata) if key == detached), len(metadata))
        metadata[at:at] = parts
        pieces = gvariant.encode(SUPERBLOCK_TYPE, (metadata, *superblock.value[1:]))
        _write_pieces(dest, pieces)
    checked = check_offline_file(dest)
    return OfflineFile(dest.name, checked.from_commit, from_version, checked.to_commit,
                       checked.to_version, dest.stat().st_size, checked.sha256, checked.parts)


def _write_pieces(dest: Path, pieces: list[gvariant.Piece]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            gvariant.write_pieces(pieces, out)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def index_json(ref: str, to_commit: str, to_version: str | None,
               files: Sequence[OfflineFile]) -> str:
    """DIR/deltas/REF/index.json: every offline file to the ref's head (docs/offline-deltas.md)."""
    return json.dumps({"format": INDEX_FORMAT, "ref": ref, "to_commit": to_commit,
                       "to_version": to_version, "files": [asdict(f) for f in files]},
                      indent=2, sort_keys=True) + "\n"


# --- applying on a device -----------------------------------------------------------------

def apply_offline(runner: Runner, repo_path: Path, delta_file: Path,
                  verify_remote: str | None = None) -> str:
    """Check an offline file, apply it to a device repo, return the commit it delivered.

    With `verify_remote`, the delivered commit's GPG signature (which the delta carries) must
    verify with that remote's keys, as a pull with gpg-verify=true would require: a USB stick
    is no more trusted than the network."""
    checked = check_offline_file(delta_file)
    repo = Repo(repo_path, runner)
    if not repo.exists():
        raise OfflineDeltaError(f"{repo_path} is not an ostree repository")
    source = checked.from_commit
    if source is not None and not repo.has_commit(source):
        raise OfflineDeltaError(
            f"{delta_file.name}: commit {source}, the delta's source, is not in repository "
            f"{repo_path}", hint="this file updates devices that run that commit; use the "
                                 "file whose name starts with the device's commit, or "
                                 "empty-*.delta")
    commit = checked.to_commit
    repo.delta_apply_offline(delta_file)
    if not repo.has_commit(commit):
        raise OfflineDeltaError(f"after applying {delta_file.name}, {repo_path} lacks "
                                f"commit {commit}")
    if verify_remote is not None:
        keys = _remote_keys(runner, repo_path, verify_remote)
        # `ostree show --gpg-verify-remote` only prints its verdict; a pull of the commit's
        # metadata with gpg-verify=true fails on a bad signature, as a device's pull would.
        if not signed_by(runner, repo_path, commit, keys):
            raise OfflineDeltaError(
                f"{delta_file.name}: commit {commit[:12]} does not verify with the keys of "
                f"remote {verify_remote!r}",
                hint="do not deploy it; its objects stay unreferenced and `ostree prune` "
                     "removes them")
    return commit


def _remote_keys(runner: Runner, repo_path: Path, remote: str) -> Path:
    """The keyring a remote verifies with: its gpgkeypath, or what --gpg-import stored."""
    configured = runner.run(["ostree", f"--repo={repo_path}", "config", "get",
                             f"--group=remote \"{remote}\"", "gpgkeypath"], check=False)
    path = configured.stdout.decode().strip()
    if configured.returncode == 0 and path:
        return Path(path)
    imported = repo_path / f"{remote}.trustedkeys.gpg"
    if imported.is_file():
        return imported
    raise OfflineDeltaError(f"remote {remote!r} of {repo_path} has no GPG keys to verify with",
                            hint="add the remote with --gpg-import=KEY.asc")
