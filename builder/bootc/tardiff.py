"""Layer deltas in containers/tar-diff's format, made with the builder's bsdiff.

A tar-diff (media type application/vnd.tar-diff; containers/tar-diff, file-format.md) is
the header `tardf1\\n\\0` and a zstd stream of operations that, read in order against the
files of the image a device already has, emit the new layer's uncompressed tar byte for
byte: DATA (bytes as they are), OPEN (a source file by its path in the old image; the
source position goes to 0), COPY (bytes of the source), ADD_DATA (the source's bytes plus
the op's, bytewise mod 256, as bsdiff's diff bytes are added), SEEK (the source position).
Each op is one byte, a uvarint size, then the data (none for COPY and SEEK).

Tar headers and small files go as DATA; a file whose content the old image has anywhere is
COPYed; a file with a predecessor (same path, else the same name at the most similar path:
an image store's layer directories are renamed when an image is rebuilt) goes as the bsdiff
stream of the two, whose triples map one to one onto ADD_DATA, DATA and SEEK. A delta is
applied back before it is used, and the result must hash to the layer's diff_id.

Applying trusts nothing in the delta: a source path that is absolute, has `..`, or leads
(through a symlink) outside the old image's root is refused, as are unknown ops, ops over
MAX_OP bytes, reads past a source's end and a stream cut short.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from builder.core.errors import BuildError
from builder.core.runner import Runner
from builder.delta import bsdiff

HEADER = b"tardf1\n\x00"
MEDIA_TYPE = "application/vnd.tar-diff"
DATA, OPEN, COPY, ADD_DATA, SEEK = range(5)
CHUNK = 8 << 20        # an op's data is cut at this size: applying holds no more at once
MAX_OP = 64 << 20      # what an applier accepts in one op's data
MAX_NAME = 4096        # and in a source path
SMALL = 64             # files below this go as they are: an OPEN costs about as much
ZSTD_LEVEL = 19


class BadDelta(BuildError):
    """A tar-diff that cannot be applied: the message names the delta and what is wrong."""


@dataclass
class Stats:
    copied: int = 0      # new-file bytes read whole from an identical old file
    diffed: int = 0      # new-file bytes made from a similar old file by bsdiff
    literal: int = 0     # bytes sent as they are (tar headers, new files)
    files: dict[str, int] = field(default_factory=lambda: {"copied": 0, "diffed": 0,
                                                           "literal": 0})


class _Ops:
    """The uncompressed operation stream, DATA ops merged and every op cut at CHUNK."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.pending = bytearray()

    def data(self, payload: bytes | memoryview) -> None:
        self.pending += payload
        while len(self.pending) >= CHUNK:
            self._op(DATA, CHUNK, self.pending[:CHUNK])
            del self.pending[:CHUNK]

    def flush(self) -> None:
        if self.pending:
            self._op(DATA, len(self.pending), self.pending)
            self.pending = bytearray()

    def open(self, path: str) -> None:
        self.flush()
        name = path.encode()
        self._op(OPEN, len(name), name)

    def copy(self, size: int) -> None:
        self.flush()
        for start in range(0, size, CHUNK):
            self._op(COPY, min(CHUNK, size - start))

    def add(self, payload: bytes | memoryview) -> None:
        self.flush()
        for start in range(0, len(payload), CHUNK):
            piece = payload[start:start + CHUNK]
            self._op(ADD_DATA, len(piece), piece)

    def seek(self, position: int) -> None:
        self.flush()
        self._op(SEEK, position)

    def _op(self, op: int, size: int, payload: bytes | bytearray | memoryview = b"") -> None:
        self.out.append(op)
        self.out += _uvarint(size)
        self.out += payload


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@dataclass(frozen=True)
class Sources:
    """The regular files of the image a device runs, by path, content and name."""

    root: Path
    sizes: dict[str, int]
    by_digest: dict[str, str]
    by_name: dict[str, list[str]]

    def similar(self, path: str, size: int) -> str | None:
        if path in self.sizes:
            return path
        candidates = self.by_name.get(path.rsplit("/", 1)[-1], [])
        if not candidates:
            return None
        parts = path.split("/")
        return max(candidates, key=lambda c: (_common_suffix(c.split("/"), parts),
                                              -abs(self.sizes[c] - size), c))


def _common_suffix(a: list[str], b: list[str]) -> int:
    count = 0
    while count < min(len(a), len(b)) and a[-1 - count] == b[-1 - count]:
        count += 1
    return count


def index_sources(root: Path) -> Sources:
    sizes: dict[str, int] = {}
    by_digest: dict[str, str] = {}
    by_name: dict[str, list[str]] = {}
    for path in sorted(_regular_files(root)):
        rel = path.relative_to(root).as_posix()
        data = path.read_bytes()
        sizes[rel] = len(data)
        by_digest.setdefault(hashlib.sha256(data).hexdigest(), rel)
        by_name.setdefault(path.name, []).append(rel)
    return Sources(root, sizes, by_digest, by_name)


def _regular_files(root: Path) -> Iterator[Path]:
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory, name)
            if path.is_file() and not path.is_symlink():
                yield path


def make(new_tar: bytes, sources: Sources, runner: Runner, *, threads: int = 1,
         level: int = ZSTD_LEVEL) -> tuple[bytes, Stats]:
    """The tar-diff that rebuilds `new_tar` (an uncompressed layer) from `sources`."""
    ops, stats = _Ops(), Stats()
    view = memoryview(new_tar)
    done = 0
    with tarfile.open(fileobj=io.BytesIO(new_tar), mode="r:") as tar:
        for member in tar:
            if not member.isreg() or member.issparse() or member.size < SMALL:
                continue
            ops.data(view[done:member.offset_data])
            stats.literal += member.offset_data - done
            end = member.offset_data + member.size
            _file(ops, view[member.offset_data:end], clean_path(member.name), sources, stats,
                  threads=threads)
            done = end
    ops.data(view[done:])
    stats.literal += len(new_tar) - done
    ops.flush()
    compressed = runner.run(["zstd", "-q", f"-{level}", "-c", "-"], input=bytes(ops.out),
                            timeout=3600).stdout
    return HEADER + compressed, stats


def _file(ops: _Ops, content: memoryview, name: str, sources: Sources, stats: Stats, *,
          threads: int) -> None:
    same = sources.by_digest.get(hashlib.sha256(content).hexdigest())
    old = same or sources.similar(name, len(content))
    if old is None:
        ops.data(content)
        stats.literal += len(content)
        stats.files["literal"] += 1
        return
    ops.open(old)
    if same is not None:
        ops.copy(len(content))
        stats.copied += len(content)
        stats.files["copied"] += 1
        return
    stream = bsdiff.diff((sources.root / old).read_bytes(), content, threads=threads)
    _bsdiff_ops(ops, memoryview(stream))
    stats.diffed += len(content)
    stats.files["diffed"] += 1


def _bsdiff_ops(ops: _Ops, stream: memoryview) -> None:
    """bsdiff's triples (x diff bytes added to the old file, y extra bytes, then the old
    position moves by x + z) as ADD_DATA, DATA and an absolute SEEK."""
    at = position = 0
    while at < len(stream):
        x, y, z = (_offtin(stream[at + 8 * i:at + 8 * i + 8]) for i in range(3))
        at += 24
        if x:
            ops.add(stream[at:at + x])
            at, position = at + x, position + x
        if y:
            ops.data(stream[at:at + y])
            at += y
        if z:
            position += z
            ops.seek(position)


def _offtin(raw: memoryview) -> int:
    magnitude = int.from_bytes(raw, "little") & ~(1 << 63)
    return -magnitude if raw[7] & 0x80 else magnitude


def clean_path(name: str) -> str:
    """A tar member's name as a path in the image: no leading `./` or `/`, no empty parts."""
    return "/".join(part for part in name.split("/") if part not in ("", "."))


def apply(delta: bytes, root: Path, out: BinaryIO, runner: Runner, *,
          what: str = "tar-diff") -> tuple[int, str]:
    """Write the layer `delta` rebuilds from the files under `root` to `out`: its size and
    sha256 (the layer's diff_id)."""
    if not delta.startswith(HEADER):
        raise BadDelta(f"{what}: not a tar-diff (the header is not 'tardf1')")
    proc = runner.run(["zstd", "-q", "-d", "-c", "-"], input=delta[len(HEADER):],
                      check=False, timeout=3600)
    if proc.returncode != 0:
        raise BadDelta(f"{what}: the zstd stream does not decompress "
                       f"({proc.stderr.decode(errors='replace').strip()[:200]})")
    return _Applier(memoryview(proc.stdout), root.resolve(), out, what).run()


class _Applier:
    def __init__(self, ops: memoryview, root: Path, out: BinaryIO, what: str) -> None:
        self.ops, self.root, self.out, self.what = ops, root, out, what
        self.at = 0
        self.source: BinaryIO | None = None
        self.source_name = ""
        self.sha = hashlib.sha256()
        self.size = 0

    def run(self) -> tuple[int, str]:
        try:
            while self.at < len(self.ops):
                self._step()
        finally:
            if self.source is not None:
                self.source.close()
        return self.size, "sha256:" + self.sha.hexdigest()

    def _step(self) -> None:
        op = self.ops[self.at]
        self.at += 1
        size = self._uvarint()
        if op in (DATA, ADD_DATA, OPEN) and size > (MAX_NAME if op == OPEN else MAX_OP):
            raise BadDelta(f"{self.what}: an op of {size} bytes at byte {self.at} of the "
                           f"stream (at most {MAX_NAME if op == OPEN else MAX_OP})")
        if op == DATA:
            self._emit(self._take(size))
        elif op == OPEN:
            self._open(bytes(self._take(size)).decode(errors="replace"))
        elif op == COPY:
            for start in range(0, size, CHUNK):
                self._emit(self._read(min(CHUNK, size - start)))
        elif op == ADD_DATA:
            added = self._take(size)
            base = self._read(size)
            self._emit(_add(added, base))
        elif op == SEEK:
            self._need_source().seek(size)
        else:
            raise BadDelta(f"{self.what}: unknown op {op} at byte {self.at - 1} of the stream "
                           "(tar-diff has ops 0 to 4)")

    def _uvarint(self) -> int:
        value = shift = 0
        while True:
            if self.at >= len(self.ops) or shift > 63:
                raise BadDelta(f"{self.what}: the stream ends inside an op's size")
            byte = self.ops[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def _take(self, size: int) -> memoryview:
        if self.at + size > len(self.ops):
            raise BadDelta(f"{self.what}: the stream ends inside an op's data")
        piece = self.ops[self.at:self.at + size]
        self.at += size
        return piece

    def _open(self, name: str) -> None:
        if self.source is not None:
            self.source.close()
            self.source = None
        self.source = open_source(self.root, name, self.what)
        self.source_name = name

    def _need_source(self) -> BinaryIO:
        if self.source is None:
            raise BadDelta(f"{self.what}: an op reads a source before any is opened")
        return self.source

    def _read(self, size: int) -> bytes:
        data = self._need_source().read(size)
        if len(data) != size:
            raise BadDelta(f"{self.what}: reads past the end of {self.source_name}")
        return data

    def _emit(self, data: bytes | memoryview) -> None:
        self.out.write(data)
        self.sha.update(data)
        self.size += len(data)


def _add(added: memoryview, base: bytes) -> bytes:
    """Bytewise sum mod 256 of two equal-length byte strings, all bytes at once as one
    integer: the low seven bits of each byte are summed (no carry can leave the byte), the
    high bit is their xor with both high bits."""
    count = len(base)
    lows = int.from_bytes(b"\x7f" * count, "little")
    highs = int.from_bytes(b"\x80" * count, "little")
    a, b = int.from_bytes(added, "little"), int.from_bytes(base, "little")
    return (((a & lows) + (b & lows)) ^ ((a ^ b) & highs)).to_bytes(count, "little")


def open_source(root: Path, name: str, what: str) -> BinaryIO:
    """A source file of the old image, refused unless it is a regular file under `root`."""
    parts = name.split("/")
    if len(name) > MAX_NAME or "\0" in name or name.startswith("/") or \
            any(part in ("", ".", "..") for part in parts):
        raise BadDelta(f"{what}: source path {name[:200]!r} is not a plain relative path "
                       "inside the old image")
    path = Path(os.path.realpath(root / name))
    if not path.is_relative_to(root) or not path.is_file():
        raise BadDelta(f"{what}: source {name[:200]!r} is not a regular file of the old "
                       f"image under {root}")
    return path.open("rb")


def rebuild_layer(delta: bytes, root: Path, diff_id: str, out: Path, runner: Runner, *,
                  what: str) -> int:
    """Apply `delta` into `out` and check it is the layer named by `diff_id`."""
    try:
        with out.open("wb") as handle:
            size, digest = apply(delta, root, handle, runner, what=what)
    except BaseException:
        out.unlink(missing_ok=True)   # nothing half-written stays
        raise
    if digest != diff_id:
        out.unlink()
        raise BadDelta(f"{what}: rebuilds a layer with diff_id {digest}, not the image's "
                       f"{diff_id}")
    return size
