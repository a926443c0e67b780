"""Applying an image-mode delta on the device: the new image's layers rebuilt from the files
of the image it runs, each checked against the signed image before anything is staged.

The delta is what the builder's bootc stage writes (builder/bootc/image_delta.py): an OCI
layout laid out as containers/oci-delta's, whose one manifest carries the new image's
manifest and config (`io.github.containers.delta.content`: image-manifest, image-config)
and one image-layer per layer the old image lacks: a tar-diff (containers/tar-diff's
file-format.md: the header `tardf1\\n\\0`, then a zstd stream of DATA, OPEN, COPY, ADD_DATA
and SEEK ops) or the gzip'ed layer itself.

This module is the device's side of builder/bootc/tardiff.py's `apply`, in the standard
library only (the updater runs on RHEL 9's Python 3.9, with no compiled extension): the zstd
CLI decompresses, streaming, and the ops are read as they come, so a layer of any size is
rebuilt in bounded memory. Nothing in a delta is trusted: a source path that is absolute,
has `..` or leads outside the old image; an unknown op, an op over MAX_OP bytes, a read past
a source's end, a stream cut short, a blob that does not hash to its digest, an embedded
manifest other than the signed one, a layer that rebuilds to another diff_id, or output past
the disk budget: each is refused with one line, and the layer being written is removed.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from builder.updater.index import UpdateRefused

HEADER = b"tardf1\n\x00"
TAR_DIFF = "application/vnd.tar-diff"
ARTIFACT = "application/vnd.io.github.containers.oci-delta.v1"
PREFIX = "io.github.containers.delta."
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
SIGNED = "io.microshift.update.signed-manifest"
DATA, OPEN, COPY, ADD_DATA, SEEK = range(5)
CHUNK = 1 << 20
MAX_OP = 64 << 20       # as the builder's applier: what one op's data may be
MAX_NAME = 4096
MAX_JSON = 4 << 20      # a manifest or config is a few KiB
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
Resolve = Callable[[str], Path]   # a source's image path -> the file on the device


class BadImageDelta(UpdateRefused):
    """A delta the device must not use: nothing was staged."""


@dataclass(frozen=True)
class Rebuilt:
    """What a delta gave: the signed image (its manifest and config bytes) and, for each of
    its layers the delta carried, the uncompressed layer file named by its diff_id."""

    manifest_digest: str
    manifest: bytes
    config: bytes
    layers: dict[str, Path]        # diff_id -> rebuilt, checked layer tar
    diff_ids: list[str]            # the image's, in layer order
    bytes_written: int


def deployment_resolver(root: Path) -> Resolve:
    """Image paths in the files of a deployment: an ostree deployment keeps the image's
    pristine /etc as /usr/etc (ostree-rs-ext's import moves it there), and its /etc is the
    admin's merged copy, which a delta must not read from."""
    def resolve(name: str) -> Path:
        if name == "etc" or name.startswith("etc/"):
            return root / "usr" / name
        return root / name
    return resolve


def _source(resolve: Resolve, top: Path, name: str, what: str) -> IO[bytes]:
    parts = name.split("/")
    if len(name) > MAX_NAME or "\0" in name or name.startswith("/") or \
            any(part in ("", ".", "..") for part in parts):
        raise BadImageDelta(f"{what}: source path {name[:200]!r} is not a plain relative "
                            "path inside the old image")
    path = Path(os.path.realpath(resolve(name)))
    if not (path == top or top in path.parents) or not path.is_file():
        raise BadImageDelta(f"{what}: source {name[:200]!r} is not a regular file of the "
                            f"booted image under {top}")
    return path.open("rb")


class _Ops:
    """The decompressed op stream, read as zstd writes it."""

    def __init__(self, stream: IO[bytes], what: str) -> None:
        self.stream, self.what = stream, what
        self.at = 0

    def byte(self) -> int | None:
        data = self.stream.read(1)
        self.at += len(data)
        return data[0] if data else None

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.byte()
            if byte is None or shift > 63:
                raise BadImageDelta(f"{self.what}: the stream ends inside an op's size")
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def take(self, size: int) -> bytes:
        data = self.stream.read(size)
        self.at += len(data)
        if len(data) != size:
            raise BadImageDelta(f"{self.what}: the stream ends inside an op's data")
        return data


class _Layer:
    """One layer being rebuilt: the ops applied against the old image's files into `out`."""

    def __init__(self, resolve: Resolve, top: Path, out: IO[bytes], budget: int,
                 what: str) -> None:
        self.resolve, self.top, self.out, self.budget = resolve, top, out, budget
        self.what = what
        self.source: IO[bytes] | None = None
        self.source_name = ""
        self.sha = hashlib.sha256()
        self.size = 0

    def run(self, ops: _Ops) -> None:
        try:
            while True:
                op = ops.byte()
                if op is None:
                    return
                self._step(ops, op)
        finally:
            if self.source is not None:
                self.source.close()

    def _step(self, ops: _Ops, op: int) -> None:
        size = ops.uvarint()
        limit = MAX_NAME if op == OPEN else MAX_OP
        if op in (DATA, ADD_DATA, OPEN) and size > limit:
            raise BadImageDelta(f"{self.what}: an op of {size} bytes at byte {ops.at} of the "
                                f"stream (at most {limit})")
        if op == DATA:
            self._emit(ops.take(size))
        elif op == OPEN:
            if self.source is not None:
                self.source.close()
                self.source = None
            self.source_name = ops.take(size).decode(errors="replace")
            self.source = _source(self.resolve, self.top, self.source_name, self.what)
        elif op == COPY:
            for start in range(0, size, CHUNK):
                self._emit(self._read(min(CHUNK, size - start)))
        elif op == ADD_DATA:
            added = ops.take(size)
            self._emit(add_bytes(added, self._read(size)))
        elif op == SEEK:
            self._need_source().seek(size)
        else:
            raise BadImageDelta(f"{self.what}: unknown op {op} at byte {ops.at - 1} of the "
                                "stream (tar-diff has ops 0 to 4)")

    def _need_source(self) -> IO[bytes]:
        if self.source is None:
            raise BadImageDelta(f"{self.what}: an op reads a source before any is opened")
        return self.source

    def _read(self, size: int) -> bytes:
        data = self._need_source().read(size)
        if len(data) != size:
            raise BadImageDelta(f"{self.what}: reads past the end of {self.source_name}")
        return data

    def _emit(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.budget:
            raise BadImageDelta(f"{self.what}: the layer grows past the {self.budget} bytes "
                                "left in the staging budget (staging_max_bytes)")
        self.out.write(data)
        self.sha.update(data)


def add_bytes(added: bytes, base: bytes) -> bytes:
    """Bytewise sum mod 256 (bsdiff's diff bytes added to the old file's): the low seven
    bits of every byte summed at once as one integer, no carry leaving a byte, the high bit
    the xor of both high bits and the low bits' carry."""
    count = len(base)
    lows = int.from_bytes(b"\x7f" * count, "little")
    highs = int.from_bytes(b"\x80" * count, "little")
    a, b = int.from_bytes(added, "little"), int.from_bytes(base, "little")
    return (((a & lows) + (b & lows)) ^ ((a ^ b) & highs)).to_bytes(count, "little")


def apply_tar_diff(delta: Path, resolve: Resolve, top: Path, out: Path, diff_id: str, *,
                   budget: int, what: str) -> int:
    """Rebuild the layer `delta` (a tar-diff file) makes into `out`, which must hash to
    `diff_id`; its size. Nothing is left at `out` when it does not."""
    with delta.open("rb", buffering=0) as source:
        if source.read(len(HEADER)) != HEADER:
            raise BadImageDelta(f"{what}: not a tar-diff (the header is not 'tardf1')")
        # Unbuffered: zstd reads the file from right after the header, never all in memory.
        try:
            proc = subprocess.Popen(["zstd", "-q", "-d", "-c", "-"], stdin=source,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as exc:
            raise UpdateRefused(f"{what}: zstd cannot run ({exc.strerror})",
                                hint="install zstd: image-mode deltas are zstd streams") from None
    assert proc.stdout is not None and proc.stderr is not None
    layer: _Layer | None = None
    try:
        with out.open("wb") as handle:
            layer = _Layer(resolve, top, handle, budget, what)
            layer.run(_Ops(proc.stdout, what))
    except BaseException:
        proc.kill()
        out.unlink(missing_ok=True)
        raise
    finally:
        proc.stdout.close()
        error = proc.stderr.read().decode(errors="replace").strip()
        proc.stderr.close()
        code = proc.wait()
    if code != 0:
        out.unlink(missing_ok=True)
        raise BadImageDelta(f"{what}: the zstd stream does not decompress "
                            f"({(error.splitlines() or ['exit ' + str(code)])[-1][:200]})")
    digest = "sha256:" + layer.sha.hexdigest()
    if digest != diff_id:
        out.unlink()
        raise BadImageDelta(f"{what}: rebuilds a layer with diff_id {digest}, not the signed "
                            f"image's {diff_id}")
    return layer.size


def _gunzip_checked(blob: Path, out: Path, diff_id: str, *, budget: int, what: str) -> int:
    """A layer carried whole: its uncompressed tar, which must hash to `diff_id`."""
    sha, size = hashlib.sha256(), 0
    try:
        with gzip.open(blob, "rb") as source, out.open("wb") as handle:
            for piece in iter(lambda: source.read(CHUNK), b""):
                size += len(piece)
                if size > budget:
                    raise BadImageDelta(f"{what}: the layer grows past the {budget} bytes "
                                        "left in the staging budget (staging_max_bytes)")
                sha.update(piece)
                handle.write(piece)
    except (OSError, EOFError) as exc:
        out.unlink(missing_ok=True)
        raise BadImageDelta(f"{what}: not a gzip'ed layer ({exc})") from None
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    if "sha256:" + sha.hexdigest() != diff_id:
        out.unlink()
        raise BadImageDelta(f"{what}: unpacks to diff_id sha256:{sha.hexdigest()}, not the "
                            f"signed image's {diff_id}")
    return size


def file_digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            sha.update(block)
    return "sha256:" + sha.hexdigest()


class DeltaLayout:
    """An oci-delta layout on disk, every blob checked against its digest before use."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def blob(self, descriptor: Any) -> Path:
        digest = descriptor.get("digest") if isinstance(descriptor, dict) else None
        if not isinstance(digest, str) or not DIGEST.match(digest):
            raise BadImageDelta(f"{self.root}: blob digest {str(digest)[:80]!r} is not "
                                "sha256:<64 hex>")
        path = self.root / "blobs/sha256" / digest[len("sha256:"):]
        if not path.is_file():
            raise BadImageDelta(f"{self.root}: blob {digest[:19]} is missing")
        if file_digest(path) != digest:
            raise BadImageDelta(f"{self.root}: blob {digest[:19]} does not hash to its digest")
        return path

    def json(self, descriptor: Any) -> tuple[bytes, dict[str, Any]]:
        path = self.blob(descriptor)
        data = _bounded(path, f"{self.root}: blob {descriptor.get('digest', '')[:19]}")
        return data, _object(data, f"{self.root}: blob {descriptor['digest'][:19]}")

    def manifest(self) -> dict[str, Any]:
        data = _bounded(self.root / "index.json", f"{self.root}/index.json")
        entries = _object(data, f"{self.root}/index.json").get("manifests")
        if not isinstance(entries, list) or len(entries) != 1 or \
                not isinstance(entries[0], dict) or entries[0].get("artifactType") != ARTIFACT:
            raise BadImageDelta(f"{self.root}: not an oci-delta layout (one manifest of "
                                f"artifactType {ARTIFACT})")
        return self.json(entries[0])[1]


def _bounded(path: Path, what: str) -> bytes:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_JSON + 1)
    except OSError as exc:
        raise BadImageDelta(f"{what}: {exc.strerror or exc}") from None
    if len(data) > MAX_JSON:
        raise BadImageDelta(f"{what}: larger than {MAX_JSON} bytes; allowed: a JSON document")
    return data


def _object(data: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise BadImageDelta(f"{what}: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise BadImageDelta(f"{what}: not a JSON object")
    return value
