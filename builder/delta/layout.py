"""Which objects an update path carries, how each travels, and how they are cut into parts.

The objects are ostree's: every dirtree, dirmeta and content object of the to-commit that
the from-commit lacks (the to-commit itself travels in the superblock). A new regular file
that ostree's rule pairs with an old one (builder/delta/pairs.py) travels as a bsdiff
against it, when the old one is world-readable (ostree's condition: a bare-user device
must be able to read it); every other object travels whole.

Parts are cut so that the same objects make the same part in every path, profile and
release that needs them, and a part is then made once (builder/delta/cache.py):
- an object of OWN_PART bytes or more travels in a part of its own (the executable's
  bsdiff, a large library sent whole);
- the other objects follow each other in tree order (metadata apart from content), and a
  part ends after an object whose checksum, read as a fraction, is below its size over
  the target size, or before one that would take the part past the maximum. The ends
  depend on the objects alone, so a run of objects two paths share is cut alike after its
  first end.
A part's identity is its object list (type, checksum, and the bsdiff source) and the
encoder settings that decide its bytes.
"""

from __future__ import annotations

import hashlib
import json
import stat
from collections.abc import Sequence
from dataclasses import dataclass

from builder.core.ostree import TreeEntry, regular_files
from builder.delta.bsdiff import SEGMENT_BYTES
from builder.delta.objects import DIRMETA, DIRTREE, FILE
from builder.delta.pairs import similar_pairs

# Bump when the bytes a part plan turns into change (its cached parts are not reused).
FORMAT = 1
METADATA_ESTIMATE = 1024  # listing gives no size for dirtree/dirmeta objects
BSDIFF_MAX_BYTES = (1 << 31) - 2  # the stream's lengths are C ints in ostree's bspatch
BSDIFF_BASE_MEMORY = 64 << 20
SA_BYTES_PER_OLD_BYTE = 5  # the old file and its suffix array (32-bit offsets)


def bsdiff_memory(old_size: int, new_size: int) -> int:
    """Peak memory of one bsdiff: the old file, its suffix array, the new file and the
    stream (about the new file's size), and the stream applied back to check it."""
    return BSDIFF_BASE_MEMORY + SA_BYTES_PER_OLD_BYTE * old_size + 3 * new_size


@dataclass(frozen=True)
class Encoder:
    """How parts are made: xz preset 8 with CRC64 as ostree's own generator compresses,
    bsdiff segments, and where parts are cut."""

    xz_preset: int = 8
    segment_bytes: int = SEGMENT_BYTES
    own_part_bytes: int = 4 << 20
    part_target_bytes: int = 8 << 20
    part_max_bytes: int = 32_000_000  # ostree's --max-chunk-size default

    def identity(self) -> dict[str, int]:
        """What a part's bytes depend on besides its objects."""
        return {"format": FORMAT, "xz_preset": self.xz_preset,
                "segment_bytes": self.segment_bytes}


@dataclass(frozen=True)
class Item:
    """One object of a part: size is the file's size (an estimate for metadata), source
    the old content object a bsdiff is made against; path (a path of it in the to-commit)
    and source_size serve messages and estimates, not the part's identity."""

    objtype: int
    checksum: str
    size: int
    source: str | None = None
    source_size: int = 0
    path: str = ""

    @property
    def kind(self) -> str:
        if self.objtype != FILE:
            return "metadata"
        return "bsdiff" if self.source else "whole"


@dataclass(frozen=True)
class PartPlan:
    items: tuple[Item, ...]

    @property
    def size(self) -> int:
        return sum(item.size for item in self.items)

    def key(self, encoder: Encoder) -> str:
        """The part's identity: its cache key."""
        text = json.dumps({"encoder": encoder.identity(),
                           "items": [[i.objtype, i.checksum, i.source] for i in self.items]},
                          sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def objects(self) -> bytes:
        """The superblock's object list: type byte and binary checksum, in build order."""
        return b"".join(bytes([i.objtype]) + bytes.fromhex(i.checksum) for i in self.items)


def plan_parts(old: Sequence[TreeEntry], new: Sequence[TreeEntry], encoder: Encoder,
               memory_limit: int | None = None) -> list[PartPlan]:
    """The parts of the delta old -> new (old is empty for a delta from scratch). A
    modified file whose bsdiff would need more than memory_limit travels whole."""
    held = {e.checksum for e in old} | {e.dirmeta for e in old if e.dirmeta}
    metadata: dict[str, Item] = {}
    content: dict[str, Item] = {}
    for entry in new:
        if entry.kind == "d":
            for objtype, checksum in ((DIRTREE, entry.checksum), (DIRMETA, entry.dirmeta)):
                if checksum and checksum not in held:
                    metadata.setdefault(checksum, Item(objtype, checksum, METADATA_ESTIMATE,
                                                       path=entry.path))
        elif entry.checksum not in held:
            content.setdefault(entry.checksum, Item(FILE, entry.checksum, entry.size,
                                                    path=entry.path))
    for new_checksum, (source, source_size) in _sources(old, new).items():
        item = content.get(new_checksum)
        if item is not None and _bsdiff_fits(source_size, item.size, memory_limit):
            content[new_checksum] = Item(FILE, new_checksum, item.size, source, source_size,
                                         item.path)
    alone = [item for item in content.values() if item.size >= encoder.own_part_bytes]
    packed = [item for item in content.values() if item.size < encoder.own_part_bytes]
    return ([PartPlan((item,)) for item in alone] + _cut(list(metadata.values()), encoder)
            + _cut(packed, encoder))


def _bsdiff_fits(old_size: int, new_size: int, memory_limit: int | None) -> bool:
    if max(old_size, new_size) > BSDIFF_MAX_BYTES:
        return False
    return memory_limit is None or bsdiff_memory(old_size, new_size) <= memory_limit


def _sources(old: Sequence[TreeEntry],
             new: Sequence[TreeEntry]) -> dict[str, tuple[str, int]]:
    """new content checksum -> the old content object it is a bsdiff against, its size."""
    if not old:
        return {}
    return {pair.new.checksum: (pair.old.checksum, pair.old.size)
            for pair in similar_pairs(regular_files(old), regular_files(new))
            if pair.old.mode & stat.S_IROTH}


def _cut(items: list[Item], encoder: Encoder) -> list[PartPlan]:
    parts: list[PartPlan] = []
    current: list[Item] = []
    size = 0
    for item in items:
        if current and size + item.size > encoder.part_max_bytes:
            parts.append(PartPlan(tuple(current)))
            current, size = [], 0
        current.append(item)
        size += item.size
        if int(item.checksum[:13], 16) / 16**13 < max(item.size, 1) / encoder.part_target_bytes:
            parts.append(PartPlan(tuple(current)))
            current, size = [], 0
    if current:
        parts.append(PartPlan(tuple(current)))
    return parts
