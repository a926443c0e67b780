"""One static delta part, made as ostree's own generator makes it and applies it.

A part file is the GVariant `(yay)`: 'x' and the xz (preset 8, CRC64) of the part
`(a(uuu)aa(ayay)ayay)`: the modes and xattrs its content objects use, a payload, and the
operations that build the objects in the order the superblock lists them
(ostree-repo-static-delta-compilation.c and -processing.c):
- a metadata object: `S` length offset (the object, from the payload);
- a content object whole: `S` mode xattrs size offset (for a symbolic link the payload
  holds its target);
- a bsdiff: `r` offset (the old object's binary checksum in the payload), `o` mode xattrs
  size, `B` offset length (the bsdiff stream, builder/delta/bsdiff.py), `c`, then `R`.
Numbers are LEB128 varints; offsets index the payload, mode and xattrs the two tables.
"""

from __future__ import annotations

import lzma
from dataclasses import dataclass, field

from builder.core import gvariant
from builder.core.gvariant import Serialized
from builder.delta import bsdiff
from builder.delta.layout import Encoder, PartPlan
from builder.delta.objects import FILE, ArchiveObjects, Content

PART_TYPE = "(a(uuu)aa(ayay)ayay)"
XZ = b"x"


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


@dataclass(frozen=True)
class BuiltPart:
    """A part file's bytes and what its header says besides them."""

    data: bytes
    uncompressed: int  # the objects' sizes, as ostree counts them
    bsdiff_bytes: int  # bytes of the bsdiff streams in the payload


@dataclass
class _Writer:
    modes: dict[bytes, int] = field(default_factory=dict)
    xattrs: dict[bytes, int] = field(default_factory=dict)
    payload: list[bytes] = field(default_factory=list)
    size: int = 0
    ops: bytearray = field(default_factory=bytearray)

    def append(self, data: bytes) -> int:
        offset = self.size
        self.payload.append(data)
        self.size += len(data)
        return offset

    def tables(self, content: Content) -> bytes:
        mode = self.modes.setdefault(content.modes, len(self.modes))
        xattrs = self.xattrs.setdefault(content.xattrs, len(self.xattrs))
        return varint(mode) + varint(xattrs)

    def metadata(self, data: bytes) -> None:
        self.ops += b"S" + varint(len(data)) + varint(self.append(data))

    def whole(self, content: Content) -> None:
        tables = self.tables(content)
        offset = self.append(content.data)
        self.ops += b"S" + tables + varint(len(content.data)) + varint(offset)

    def bsdiff(self, source: str, content: Content, stream: bytes) -> None:
        self.ops += b"r" + varint(self.append(bytes.fromhex(source)))
        self.ops += b"o" + self.tables(content) + varint(len(content.data))
        self.ops += b"B" + varint(self.append(stream)) + varint(len(stream)) + b"cR"

    def encoded(self, preset: int) -> bytes:
        pieces = gvariant.encode(PART_TYPE, ([Serialized(m) for m in self.modes],
                                             [Serialized(x) for x in self.xattrs],
                                             b"".join(self.payload), bytes(self.ops)))
        compressor = lzma.LZMACompressor(format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64,
                                         preset=preset)
        chunks = [XZ]
        for piece in pieces:
            assert not isinstance(piece, gvariant.FileSlice)  # a part is built in memory
            chunks.append(compressor.compress(piece))
        chunks.append(compressor.flush())
        return b"".join(chunks)


def build_part(objects: ArchiveObjects, plan: PartPlan, encoder: Encoder,
               threads: int = 1) -> BuiltPart:
    """The part file of `plan`: every object read from `objects`, bsdiffs made on up to
    `threads` threads."""
    writer = _Writer()
    uncompressed = streamed = 0
    for item in plan.items:
        if item.objtype != FILE:
            data = objects.metadata(item.checksum, item.objtype)
            writer.metadata(data)
            uncompressed += len(data)
            continue
        content = objects.content(item.checksum)
        uncompressed += len(content.data)
        if item.source is None:
            writer.whole(content)
            continue
        old = objects.content(item.source)
        stream = bsdiff.diff(old.data, content.data, threads, encoder.segment_bytes)
        writer.bsdiff(item.source, content, stream)
        streamed += len(stream)
    return BuiltPart(writer.encoded(encoder.xz_preset), uncompressed, streamed)
