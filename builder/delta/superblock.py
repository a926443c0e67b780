"""A static delta in the repository: its superblock and parts, as `ostree static-delta
generate` lays them out (deltas/FR/OM-TO/superblock, 0, 1, ...), written whole or not at all.

The superblock `(a{sv}tayay(commit)aya(uayttay)a(yaytt))` (ostree-repo-static-delta-
private.h): metadata (ostree.endianness 'l', and the to-commit's detached metadata, its
signatures, under deltas/FR/OM-TO/commitmeta), a big-endian timestamp (here the
commit's own, so the same commits give the same superblock), the from and to checksums,
the to-commit object byte for byte, no dependencies, one `(uayttay)` header per part
(format version 0, the part file's sha256, its size, the objects' uncompressed size, the
objects it builds) and no fallback objects. Part files are hard links to the cache's.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from builder.core import gvariant
from builder.core.gvariant import Serialized, Variant
from builder.core.ostree import delta_dir
from builder.delta.cache import CachedPart
from builder.delta.layout import PartPlan
from builder.delta.objects import COMMIT, ArchiveObjects

SUPERBLOCK_TYPE = "(a{sv}tayay(a{sv}aya(say)sstayay)aya(uayttay)a(yaytt))"
COMMIT_TYPE = "(a{sv}aya(say)sstayay)"
TIMESTAMP = 5  # the commit's member that holds its (big-endian) time
PART_VERSION = 0


def relative_key(from_commit: str | None, to_commit: str, name: str) -> str:
    return (delta_dir(Path(), from_commit, to_commit) / name).as_posix()


def superblock_bytes(objects: ArchiveObjects, from_commit: str | None, to_commit: str,
                     parts: Sequence[tuple[PartPlan, CachedPart]]) -> bytes:
    commit = objects.metadata(to_commit, COMMIT)
    metadata: list[tuple[str, Variant]] = [("ostree.endianness", Variant("y", b"l"))]
    detached = objects.detached_metadata(to_commit)
    if detached is not None:
        metadata.append((relative_key(from_commit, to_commit, "commitmeta"),
                         Variant("a{sv}", detached)))
    timestamp = gvariant.children(COMMIT_TYPE, commit)[TIMESTAMP]
    headers = [(PART_VERSION, bytes.fromhex(cached.sha256), cached.bytes, cached.uncompressed,
                plan.objects()) for plan, cached in parts]
    value: tuple[object, ...] = (metadata, Serialized(bytes(timestamp)),
             bytes.fromhex(from_commit) if from_commit else b"", bytes.fromhex(to_commit),
             Serialized(commit), b"", headers, [])
    return gvariant.join(gvariant.encode(SUPERBLOCK_TYPE, value))


WORK_PREFIX = "delta-"


def remove_leftovers(repo: Path) -> None:
    """Deltas a killed run was assembling in the repository's tmp/ (a run holds the build
    directory's lock, so no other run is writing one)."""
    for work in (repo / "tmp").glob(f"{WORK_PREFIX}*"):
        shutil.rmtree(work, ignore_errors=True)


def write_delta(objects: ArchiveObjects, from_commit: str | None, to_commit: str,
                parts: Sequence[tuple[PartPlan, CachedPart]]) -> Path:
    """The delta from_commit -> to_commit in the repository, replacing one there; returns
    its directory. It is assembled in the repository's tmp/ and renamed into place."""
    repo = objects.repo
    final = delta_dir(repo, from_commit, to_commit)
    (repo / "tmp").mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=WORK_PREFIX, dir=repo / "tmp"))
    try:
        for index, (_, cached) in enumerate(parts):
            _link(cached.path, work / str(index))
        superblock = work / "superblock"
        superblock.write_bytes(superblock_bytes(objects, from_commit, to_commit, parts))
        for path in (work, superblock):
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():
            shutil.rmtree(final)
        os.rename(work, final)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return final


def _link(source: Path, dest: Path) -> None:
    try:
        os.link(source, dest)
    except OSError:  # another file system, or one without hard links
        shutil.copyfile(source, dest)
        os.chmod(dest, 0o644)
