"""OCI image layouts, written byte-reproducibly and read back.

A layer is a PAX tar of its paths in path order, every entry dated 0 (as ostree stores
every file: a commit has no times, so a layer whose paths did not change is the same from
one release to the next), owners by number (no names), extended attributes as
`SCHILY.xattr.NAME` records (how containers/storage and bootc carry SELinux labels),
compressed with gzip level 6 and no
name or time in its header: the same paths give the same bytes, so an unchanged layer keeps
its digest from build to build. The layout (`oci-layout`, `index.json`, `blobs/sha256/`) is
what skopeo, umoci and bootc (`--transport oci`) read.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.bootc.tree import Node
from builder.core.errors import BuildError

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
XATTR = "SCHILY.xattr."
Reader = Callable[[Node], Iterable[bytes]]


@dataclass(frozen=True)
class Blob:
    digest: str      # sha256:... of the bytes stored
    size: int
    diff_id: str = ""   # a layer's uncompressed digest

    def descriptor(self, media_type: str, **extra: Any) -> dict[str, Any]:
        return {"mediaType": media_type, "digest": self.digest, "size": self.size, **extra}


class _Hashing(io.RawIOBase):
    """Passes writes on and hashes them."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.sha = hashlib.sha256()
        self.count = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.target.write(view)
        self.sha.update(view)
        self.count += len(view)
        return len(view)


class Layout:
    """An OCI image layout directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs = root / "blobs" / "sha256"

    def init(self) -> None:
        self.blobs.mkdir(parents=True, exist_ok=True)
        (self.root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')

    def blob_path(self, digest: str) -> Path:
        return self.blobs / digest.removeprefix("sha256:")

    def put(self, data: bytes) -> Blob:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        path = self.blob_path(digest)
        if not path.is_file():
            _write_new(path, data)
        return Blob(digest, len(data))

    def put_json(self, document: dict[str, Any]) -> Blob:
        return self.put(canonical(document))

    def write_layer(self, nodes: list[Node], read: Reader) -> Blob:
        """One layer of `nodes` (in path order), stored under its digest."""
        tmp = self.blobs / f".layer-{os.getpid()}.tmp"
        with tmp.open("wb") as out:
            compressed = _Hashing(out)
            with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, mtime=0,
                               compresslevel=6) as zipped:
                plain = _Hashing(zipped)
                with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                    for node in sorted(nodes, key=lambda n: n.path):
                        _add(tar, node, read)
        digest = "sha256:" + compressed.sha.hexdigest()
        os.replace(tmp, self.blob_path(digest))
        return Blob(digest, compressed.count, "sha256:" + plain.sha.hexdigest())

    def read_json(self, digest: str) -> dict[str, Any]:
        try:
            value = json.loads(self.blob_path(digest).read_bytes())
        except (OSError, ValueError) as exc:
            raise BuildError(f"{self.root}: blob {digest} is not readable JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise BuildError(f"{self.root}: blob {digest} is not a JSON object")
        return value

    def index(self) -> dict[str, Any]:
        path = self.root / "index.json"
        if not path.is_file():
            return {"schemaVersion": 2, "mediaType": INDEX, "manifests": []}
        value = json.loads(path.read_text())
        return value if isinstance(value, dict) else {}

    def write_index(self, manifests: list[dict[str, Any]]) -> None:
        document = {"schemaVersion": 2, "mediaType": INDEX, "manifests": manifests}
        _write_new(self.root / "index.json", canonical(document))

    def members(self, digest: str) -> Iterator[tuple[tarfile.TarInfo, bytes | None]]:
        """The entries of a stored layer, each regular file with its bytes."""
        with tarfile.open(self.blob_path(digest), mode="r:gz") as tar:
            for info in tar:
                handle = tar.extractfile(info) if info.isreg() else None
                yield info, (handle.read() if handle is not None else None)


def single_layout(layout: Layout, digest: str, dest: Path) -> Path:
    """A layout at `dest` holding only `layout`'s image `digest`, as `bootc switch` and
    `bootc install` read one: its blobs hard-linked (copied across file systems)."""
    single = Layout(dest)
    single.init()
    document = layout.read_json(digest)
    for blob in [digest, document["config"]["digest"],
                 *(entry["digest"] for entry in document["layers"])]:
        target = single.blob_path(blob)
        if target.exists():
            continue
        try:
            target.hardlink_to(layout.blob_path(blob))
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            shutil.copyfile(layout.blob_path(blob), target)
    media = str(document.get("mediaType") or MANIFEST)
    single.write_index([{"mediaType": media, "digest": digest,
                         "size": layout.blob_path(digest).stat().st_size}])
    return dest


def canonical(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _write_new(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _add(tar: tarfile.TarFile, node: Node, read: Reader) -> None:
    info = tarfile.TarInfo(node.path + ("/" if node.kind == "d" else ""))
    info.mode, info.uid, info.gid, info.mtime = node.mode, node.uid, node.gid, 0
    info.uname = info.gname = ""
    info.pax_headers = {XATTR + name: value.decode("utf-8", "surrogateescape")
                        for name, value in node.xattrs}
    if node.kind == "d":
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    elif node.kind == "l":
        info.type, info.linkname = tarfile.SYMTYPE, node.target
        tar.addfile(info)
    else:
        info.type, info.size = tarfile.REGTYPE, node.size
        tar.addfile(info, _Stream(read(node), node))


class _Stream(io.RawIOBase):
    """A file object over content pieces, checking the size the tar header promised."""

    def __init__(self, pieces: Iterable[bytes], node: Node) -> None:
        self.pieces = iter(pieces)
        self.node = node
        self.pending = b""
        self.total = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self.pending) < size:
            piece = next(self.pieces, None)
            if piece is None:
                break
            self.pending += piece
            self.total += len(piece)
        if self.total > self.node.size:
            raise BuildError(f"/{self.node.path}: {self.total} bytes, its header says "
                             f"{self.node.size}")
        data, self.pending = (self.pending, b"") if size < 0 else \
            (self.pending[:size], self.pending[size:])
        return data
