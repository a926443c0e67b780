"""How a static delta carries each object: read from its parts, the way ostree applies them.

A part (`(yay)`: compression byte, then xz or raw data) holds the GVariant
`(a(uuu)aa(ayay)ayay)`: file modes, xattrs, a payload and an operation stream. The stream
(ostree-repo-static-delta-processing.c) builds the part's objects in the order the
superblock lists them; each object ends with `S` (open-splice-and-close: the object whole,
from the payload) or `c` (close). Between `o` (open) and `c`, a `B` (bspatch against the
source file; ostree sets the source with `r` before the `o` and unsets it with `R` after
the `c`) means bsdiff, an `r` with `w` writes between `o` and `c` means rollsum (ranges
copied from the old file plus new bytes from the payload), and `S` or plain `w` writes mean
the object whole.
"""

from __future__ import annotations

import lzma
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from builder.core import gvariant
from builder.core.gvariant import GVariantError
from builder.publish.offline import OfflineDeltaError, Superblock

PART_PAYLOAD_TYPE = "(a(uuu)aa(ayay)ayay)"
FILE = 1
# Varint arguments each opcode reads (S depends on the object: metadata 2, content 4).
ARGS = {ord("o"): 3, ord("w"): 2, ord("r"): 1, ord("R"): 0, ord("c"): 0, ord("B"): 2}
SPLICE = ord("S")
CLOSING = (SPLICE, ord("c"))


@dataclass(frozen=True)
class Encoding:
    """How one content object travels: 'bsdiff', 'rollsum' or 'whole', and the bytes of
    the part payload it takes before compression (the patch, the new ranges, or the file)."""

    kind: str
    payload_bytes: int


def part_payload(part: bytes | memoryview, source: str) -> memoryview:
    """The uncompressed `(a(uuu)aa(ayay)ayay)` of a part file's bytes."""
    kind, body = bytes(part[:1]), part[1:]
    if kind == b"\0":
        return memoryview(body)
    if kind == b"x":
        try:
            return memoryview(lzma.decompress(body))
        except lzma.LZMAError as exc:
            raise OfflineDeltaError(f"{source}: damaged xz data: {exc}") from exc
    raise OfflineDeltaError(f"{source}: unknown part compression {kind!r}")


def _varints(ops: memoryview, at: int, count: int) -> tuple[list[int], int]:
    values = []
    for _ in range(count):
        value = shift = 0
        while True:
            if at >= len(ops):
                raise OfflineDeltaError("delta operations end inside an argument")
            byte = ops[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        values.append(value)
    return values, at


def object_encodings(payload: memoryview, objects: tuple[tuple[int, str], ...],
                     source: str) -> Iterator[tuple[str, Encoding]]:
    """(checksum, Encoding) for each content object a part builds."""
    try:
        ops = gvariant.children(PART_PAYLOAD_TYPE, payload)[3]
    except GVariantError as exc:
        raise OfflineDeltaError(f"{source}: damaged part payload: {exc}") from exc
    at = index = 0
    seen: set[int] = set()
    written = 0
    from_source = False  # 'r' points writes at the old file, 'R' back at the payload
    while at < len(ops):
        opcode = ops[at]
        if index >= len(objects):
            # bsdiff's 'r', 'o', 'B', 'c' is followed by an 'R' that belongs to no object.
            if opcode != ord("R"):
                raise OfflineDeltaError(f"{source}: operations for more objects than listed")
            at += 1
            continue
        objtype, checksum = objects[index]
        count = (4 if objtype == FILE else 2) if opcode == SPLICE else ARGS.get(opcode)
        if count is None:
            raise OfflineDeltaError(f"{source}: unknown delta operation {opcode!r}")
        args, at = _varints(ops, at + 1, count)
        seen.add(opcode)
        from_source = (from_source or opcode == ord("r")) and opcode != ord("R")
        if opcode == ord("B"):
            written += args[1]
        elif opcode == ord("w") and not from_source:
            written += args[0]
        elif opcode == SPLICE:
            written += args[-2] if objtype == FILE else args[0]
        if opcode in CLOSING:
            if objtype == FILE:
                yield checksum, Encoding(_kind(seen), written)
            index += 1
            seen, written, from_source = set(), 0, False


def _kind(seen: set[int]) -> str:
    if ord("B") in seen:
        return "bsdiff"
    if ord("r") in seen:
        return "rollsum"
    return "whole"


def delta_encodings(delta_dir: Path, superblock: Superblock) -> dict[str, Encoding]:
    """Every content object of a repository delta and how it is encoded."""
    result: dict[str, Encoding] = {}
    for index, header in enumerate(superblock.parts):
        path = delta_dir / str(index)
        payload = part_payload(path.read_bytes(), str(path))
        result.update(object_encodings(payload, header.objects, str(path)))
    return result
