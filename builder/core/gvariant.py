"""A small GVariant codec: the serialization format of ostree's objects and static deltas.

It follows GLib's "GVariant Serialisation" specification: every value is aligned to its
type's alignment (relative to its container's start), fixed-size tuples are padded to their
alignment, and variable-size children of tuples and arrays are found through little-endian
framing offsets at the container's end, whose width (1, 2, 4 or 8 bytes) is the smallest
that can address the whole container. Numbers use the byte order the caller names (ostree
writes deltas in the generating host's order and records it in the superblock).

Decoding works on a memoryview without copying: `ay` comes back as a memoryview slice, so a
superblock of hundreds of megabytes is inspected through mmap. Encoding returns pieces
(bytes, memoryviews or `FileSlice`s) that a writer streams out, so the parts of a static
delta go from their files into an offline file without being held in memory.
Maybe types (`m`) are not supported: ostree's formats do not use them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

NUMBERS = {"y": "B", "b": "?", "n": "h", "q": "H", "i": "i", "u": "I", "h": "i",
           "x": "q", "t": "Q", "d": "d"}
STRINGS = frozenset("sog")


class GVariantError(ValueError):
    """Data that is not a valid serialized GVariant of the expected type."""


@dataclass(frozen=True)
class GType:
    code: str                      # 'a', '(', '{', 'v', or a basic type letter
    children: tuple[GType, ...]
    text: str                      # the type string, e.g. "a{sv}"
    alignment: int
    fixed_size: int | None         # None: variable-size


@dataclass(frozen=True)
class FileSlice:
    """`size` bytes of a file, copied to the output when the encoded value is written."""

    path: Path
    size: int


Piece = bytes | memoryview | FileSlice


@dataclass(frozen=True)
class Serialized:
    """A value of any type already in serialized form, written byte for byte (a commit
    object inside a static delta's superblock must keep the bytes its checksum covers)."""

    data: bytes | memoryview


@dataclass(frozen=True)
class Variant:
    """A `v` value: the child's type string and its serialized bytes (kept opaque)."""

    type: str
    data: bytes | memoryview | FileSlice


def parse_type(text: str) -> GType:
    gtype, rest = _parse(text)
    if rest:
        raise GVariantError(f"trailing characters in type string {text!r}")
    return gtype


def _parse(text: str) -> tuple[GType, str]:
    if not text:
        raise GVariantError("empty type string")
    code, rest = text[0], text[1:]
    if code in NUMBERS:
        size = struct.calcsize("<" + NUMBERS[code])
        return GType(code, (), code, size, size), rest
    if code in STRINGS:
        return GType(code, (), code, 1, None), rest
    if code == "v":
        return GType("v", (), "v", 8, None), rest
    if code == "a":
        child, after = _parse(rest)
        return GType("a", (child,), text[:len(text) - len(after)], child.alignment, None), after
    if code in "({":
        close = ")" if code == "(" else "}"
        children: list[GType] = []
        while rest[:1] != close:
            if not rest:
                raise GVariantError(f"unterminated {code!r} in type string {text!r}")
            child, rest = _parse(rest)
            children.append(child)
        rest = rest[1:]
        if code == "{" and len(children) != 2:
            raise GVariantError(f"dict entry needs two types in {text!r}")
        alignment = max((c.alignment for c in children), default=1)
        fixed: int | None = None
        if all(c.fixed_size is not None for c in children):
            end = 0
            for c in children:
                end = _align(end, c.alignment) + (c.fixed_size or 0)
            fixed = max(_align(end, alignment), 1)
        return GType(code, tuple(children), text[:len(text) - len(rest)], alignment, fixed), rest
    raise GVariantError(f"unsupported type {code!r} in {text!r}")


def _align(offset: int, alignment: int) -> int:
    return (offset + alignment - 1) // alignment * alignment


def offset_size(container_size: int) -> int:
    """Width of the framing offsets of a container of this many bytes."""
    for width, limit in ((1, 0xFF), (2, 0xFFFF), (4, 0xFFFFFFFF)):
        if container_size <= limit:
            return width if container_size else 0
    return 8


def _read_offset(data: memoryview, at: int, width: int) -> int:
    return int.from_bytes(data[at:at + width], "little")


def _order(byteorder: str) -> str:
    # A misspelt order must not quietly read every number byte-swapped.
    orders = {"little": "<", "big": ">"}
    if byteorder not in orders:
        raise ValueError(f"byteorder must be 'little' or 'big', not {byteorder!r}")
    return orders[byteorder]


# --- decoding -----------------------------------------------------------------------------

def decode(type_text: str, data: bytes | memoryview, byteorder: str = "little") -> object:
    """The value of `data` as `type_text`; raises GVariantError on malformed data."""
    view = data if isinstance(data, memoryview) else memoryview(data)
    return _decode(parse_type(type_text), view, _order(byteorder))


def children(type_text: str, data: bytes | memoryview) -> list[memoryview]:
    """The serialized children of a tuple, without decoding them (cheap on big values)."""
    gtype = parse_type(type_text)
    if gtype.code != "(":
        raise GVariantError(f"{type_text} is not a tuple type")
    view = data if isinstance(data, memoryview) else memoryview(data)
    return _tuple_spans(gtype.children, view)


def _decode(gtype: GType, data: memoryview, order: str) -> object:
    code = gtype.code
    if code in NUMBERS:
        if len(data) != gtype.fixed_size:
            raise GVariantError(f"{gtype.text}: {len(data)} bytes, expected {gtype.fixed_size}")
        return struct.unpack(order + NUMBERS[code], data)[0]
    if code in STRINGS:
        if not len(data) or data[-1] != 0:
            raise GVariantError("string without its terminating NUL")
        return bytes(data[:-1]).decode()
    if code == "v":
        split = _rfind_nul(data)
        if split < 0:
            raise GVariantError("variant without a type string")
        return Variant(bytes(data[split + 1:]).decode(), data[:split])
    if code == "a":
        child = gtype.children[0]
        if child.code == "y":
            return data
        return [_decode(child, span, order) for span in _array_spans(child, data)]
    spans = _tuple_spans(gtype.children, data)
    return tuple(_decode(c, span, order) for c, span in zip(gtype.children, spans, strict=True))


def _rfind_nul(data: memoryview) -> int:
    """The separator before a variant's type string (type strings are short: look at the tail)."""
    tail = bytes(data[-1024:])
    found = tail.rfind(b"\0")
    return len(data) - len(tail) + found if found >= 0 else -1


def _array_spans(child: GType, data: memoryview) -> list[memoryview]:
    if child.fixed_size is not None:
        if len(data) % child.fixed_size:
            raise GVariantError(f"array of {child.text}: {len(data)} bytes is not a multiple "
                                f"of {child.fixed_size}")
        size = child.fixed_size
        return [data[i:i + size] for i in range(0, len(data), size)]
    if not len(data):
        return []
    width = offset_size(len(data))
    table = _read_offset(data, len(data) - width, width)
    if table > len(data) or (len(data) - table) % width:
        raise GVariantError(f"array of {child.text}: bad framing offsets")
    spans: list[memoryview] = []
    start = 0
    for at in range(table, len(data), width):
        end = _read_offset(data, at, width)
        start = _align(start, child.alignment)
        if not start <= end <= table:
            raise GVariantError(f"array of {child.text}: element outside its container")
        spans.append(data[start:end])
        start = end
    return spans


def _tuple_spans(members: Sequence[GType], data: memoryview) -> list[memoryview]:
    width = offset_size(len(data))
    frame_end = len(data)  # framing offsets are read backwards from the end
    spans: list[memoryview] = []
    offset = 0
    for index, member in enumerate(members):
        offset = _align(offset, member.alignment)
        if member.fixed_size is not None:
            end = offset + member.fixed_size
        elif index == len(members) - 1:
            end = frame_end
        else:
            frame_end -= width
            end = _read_offset(data, frame_end, width)
        if not offset <= end <= len(data):
            raise GVariantError("tuple member outside its container")
        spans.append(data[offset:end])
        offset = end
    return spans


# --- encoding -----------------------------------------------------------------------------

def encode(type_text: str, value: object, byteorder: str = "little") -> list[Piece]:
    """Serialize `value` as `type_text`; returns pieces to `write_pieces` or `join`."""
    return _encode(parse_type(type_text), value, _order(byteorder))


def piece_size(piece: Piece) -> int:
    return piece.size if isinstance(piece, FileSlice) else len(piece)


def join(pieces: Iterable[Piece]) -> bytes:
    return b"".join(_read_slice(p) if isinstance(p, FileSlice) else bytes(p) for p in pieces)


def write_pieces(pieces: Iterable[Piece], out: BinaryIO, chunk: int = 1 << 22) -> int:
    written = 0
    for piece in pieces:
        if isinstance(piece, FileSlice):
            with piece.path.open("rb") as source:
                remaining = piece.size
                while remaining:
                    block = source.read(min(chunk, remaining))
                    if not block:
                        raise GVariantError(f"{piece.path} is shorter than {piece.size} bytes")
                    out.write(block)
                    remaining -= len(block)
        else:
            out.write(piece)
        written += piece_size(piece)
    return written


def _read_slice(piece: FileSlice) -> bytes:
    with piece.path.open("rb") as source:
        return source.read(piece.size)


def _encode(gtype: GType, value: object, order: str) -> list[Piece]:
    if isinstance(value, Serialized):
        return [value.data]
    return _encode_value(gtype, value, order)


def _encode_value(gtype: GType, value: object, order: str) -> list[Piece]:
    code = gtype.code
    if code in NUMBERS:
        return [struct.pack(order + NUMBERS[code], value)]
    if code in STRINGS:
        assert isinstance(value, str)
        return [value.encode() + b"\0"]
    if code == "v":
        assert isinstance(value, Variant)
        return [value.data, b"\0" + value.type.encode()]
    if code == "a":
        child = gtype.children[0]
        if child.code == "y":
            assert isinstance(value, bytes | memoryview | FileSlice)
            return [value]
        assert isinstance(value, list)
        return _frame([_encode(child, item, order) for item in value], [child] * len(value),
                      array=True, fixed=child.fixed_size is not None)
    assert isinstance(value, tuple) and len(value) == len(gtype.children)
    members = [_encode(c, v, order) for c, v in zip(gtype.children, value, strict=True)]
    pieces = _frame(members, list(gtype.children), array=False, fixed=gtype.fixed_size is not None)
    if gtype.fixed_size is not None:  # fixed-size tuples are padded to their alignment
        pad = gtype.fixed_size - sum(map(piece_size, pieces))
        pieces.append(b"\0" * pad)
    return pieces


def _frame(members: list[list[Piece]], types: list[GType], *, array: bool,
           fixed: bool) -> list[Piece]:
    """Lay members out with alignment padding, then the framing offsets they need."""
    pieces: list[Piece] = []
    ends: list[int] = []
    offset = 0
    for index, (member, gtype) in enumerate(zip(members, types, strict=True)):
        pad = _align(offset, gtype.alignment) - offset
        if pad:
            pieces.append(b"\0" * pad)
        pieces.extend(member)
        offset += pad + sum(map(piece_size, member))
        # Arrays frame every variable-size element; tuples every variable-size member
        # but the last, whose end is where the framing offsets begin.
        last = index == len(members) - 1
        if (array and not fixed) or (not array and gtype.fixed_size is None and not last):
            ends.append(offset)
    if not ends:
        return pieces
    width = next(w for w in (1, 2, 4, 8) if offset_size(offset + len(ends) * w) <= w)
    table = ends if array else list(reversed(ends))
    pieces.append(b"".join(end.to_bytes(width, "little") for end in table))
    return pieces
