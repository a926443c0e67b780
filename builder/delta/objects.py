"""The objects of an archive-mode ostree repository, read as a static delta carries them.

A content object is `objects/XX/REST.filez`: a 4-byte big-endian header length, 4 bytes of
padding, the header GVariant `(tuuuusa(ayay))` (size, uid, gid, mode, rdev, symlink
target, xattrs; the numbers stored big-endian), then the file's bytes as raw deflate
(ostree-core.c, _ostree_zlib_file_header_new). A delta part wants the uid, gid and mode
as the `(uuu)` of big-endian numbers they already are, and the xattrs as they are
serialized, so both are taken over byte for byte. Metadata objects (`.dirtree`,
`.dirmeta`, `.commit`, `.commitmeta`) are stored as the GVariants a delta carries.
"""

from __future__ import annotations

import stat
import zlib
from dataclasses import dataclass
from pathlib import Path

from builder.core import gvariant
from builder.core.errors import BuildError
from builder.core.gvariant import GVariantError
from builder.core.ostree import object_path, repo_mode

HEADER_TYPE = "(tuuuusa(ayay))"
FILE, DIRTREE, DIRMETA, COMMIT = 1, 2, 3, 4
KINDS = {DIRTREE: "dirtree", DIRMETA: "dirmeta", COMMIT: "commit"}


@dataclass(frozen=True)
class Content:
    """A content object: its `(uuu)` and xattrs as serialized, and its bytes (a regular
    file's content, or a symbolic link's target)."""

    modes: bytes
    xattrs: bytes
    symlink: bool
    data: bytes

    @property
    def mode(self) -> int:
        return int.from_bytes(self.modes[8:12], "big")


class ArchiveObjects:
    """Reads objects of one archive-mode repository (safe to share between threads)."""

    def __init__(self, repo: Path) -> None:
        if not (repo / "config").is_file():
            raise BuildError(f"no ostree repository at {repo}")
        mode = repo_mode(repo)
        if mode not in ("archive", "archive-z2"):
            raise BuildError(f"{repo} is a {mode} repository; "
                             "static deltas are compiled from an archive repository")
        self.repo = repo

    def metadata(self, checksum: str, objtype: int) -> bytes:
        return self._read(checksum, KINDS[objtype])

    def detached_metadata(self, commit: str) -> bytes | None:
        path = object_path(self.repo, commit, "commitmeta")
        return path.read_bytes() if path.is_file() else None

    def content(self, checksum: str) -> Content:
        raw = self._read(checksum, "filez")
        name = f"{checksum[:12]}.filez"
        try:
            length = int.from_bytes(raw[:4], "big")
            header = memoryview(raw)[8:8 + length]
            size, _, _, _, _, target, xattrs = gvariant.children(HEADER_TYPE, header)
            modes = bytes(header[8:20])
            symlink = stat.S_ISLNK(int.from_bytes(modes[8:12], "big"))
            if symlink:
                data = bytes(target[:-1])
            else:
                inflater = zlib.decompressobj(-zlib.MAX_WBITS)
                data = inflater.decompress(memoryview(raw)[8 + length:]) + inflater.flush()
        except (GVariantError, ValueError, zlib.error) as exc:
            raise BuildError(f"{self.repo}: damaged content object {name}: {exc}") from exc
        if not symlink and len(data) != int.from_bytes(size, "big"):
            raise BuildError(f"{self.repo}: content object {name} holds {len(data)} bytes, "
                             f"its header says {int.from_bytes(size, 'big')}")
        return Content(modes, bytes(xattrs), symlink, data)

    def _read(self, checksum: str, kind: str) -> bytes:
        path = object_path(self.repo, checksum, kind)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise BuildError(f"{self.repo}: object {checksum}.{kind} is missing",
                             hint="run `ostree fsck` on the repository") from None
