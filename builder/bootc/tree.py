"""The image's tree, read from the composed commit: every path with the mode, owner and
extended attributes (the SELinux labels among them) the commit stores, laid out as bootc
wants an image built from scratch.

The commit is read object by object from the archive repository (builder/delta/objects.py
has the format): no checkout, so ownership and labels are the commit's own, whoever runs
the build. The image differs from the commit in three ways, each a rule of image mode:

- `/usr/etc` is `/etc` (bootc's `etc-usretc` lint: a container image has /etc; ostree keeps
  the image's /etc in /usr/etc only once deployed);
- the CRI-O image cache, an additional image store in `/usr/share/containers/storage` in the
  commit, is in `/usr/lib/containers/storage` as MicroShift's own Containerfile puts it (an
  image store under /var is lost on upgrade: RHEL-75827), and /etc/containers/storage.conf
  names that path;
- what bootc needs of an image's root and ostree has no use for: `/sysroot`, the
  `/ostree -> sysroot/ostree` link, the root file system type for `bootc install`
  (/usr/lib/bootc/install/), composefs in /usr/lib/ostree/prepare-root.conf, and `/tmp` as
  a directory (bootc's `api-base-directories`; an ostree commit has it as a link to
  sysroot/tmp).

`Mapping` holds exactly these differences; the equality proof (builder/bootc/proof.py) maps
the commit with it and must then find every path of the image equal.
"""

from __future__ import annotations

import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.core import gvariant
from builder.core.errors import BuildError
from builder.core.gvariant import GVariantError
from builder.core.ostree import Repo, object_path
from builder.core.runner import Runner

HEADER_TYPE = "(tuuuusa(ayay))"
DIRMETA_TYPE = "(uuua(ayay))"
MOVES = (("usr/etc", "etc"), ("usr/share/containers/storage", "usr/lib/containers/storage"))
STORAGE_CONF = "etc/containers/storage.conf"
# Paths the image has as bootc needs them, whatever the commit has there.
REPLACED = {"tmp": ("d", 0o1777)}
ROOT_FS = "usr/lib/bootc/install/00-microshift-rootfs.toml"
PREPARE_ROOT = "usr/lib/ostree/prepare-root.conf"
Xattrs = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class Node:
    """One path of the image (relative, "" for the root): what a tar entry records."""

    path: str
    kind: str            # "d" directory, "-" regular file, "l" symbolic link
    mode: int            # permission bits and setuid/setgid/sticky
    uid: int
    gid: int
    xattrs: Xattrs = ()
    target: str = ""     # a link's target
    checksum: str = ""   # the commit's content object; "" for content made here (data)
    size: int = 0
    data: bytes | None = None


def moved(path: str) -> str:
    """Where a path of the commit is in the image."""
    for source, dest in MOVES:
        if path == source or path.startswith(source + "/"):
            return dest + path[len(source):]
    return path


def storage_conf(text: str) -> str:
    """/etc/containers/storage.conf naming the store where the image has it."""
    return text.replace(f"/{MOVES[1][0]}", f"/{MOVES[1][1]}")


@dataclass(frozen=True)
class CommitTree:
    """The commit's paths, read from an archive repository."""

    repo: Path
    commit: str
    runner: Runner

    def nodes(self) -> list[Node]:
        found = []
        for entry in Repo(self.repo, self.runner).entries(self.commit):
            path = entry.path.strip("/")
            if entry.kind == "d":
                uid, gid, mode, xattrs = self._dirmeta(entry.dirmeta or "")
                found.append(Node(path, "d", stat.S_IMODE(mode), uid, gid, xattrs))
            else:
                size, uid, gid, mode, target, xattrs = self._header(entry.checksum)
                kind = "l" if stat.S_ISLNK(mode) else "-"
                found.append(Node(path, kind, stat.S_IMODE(mode), uid, gid, xattrs, target,
                                  entry.checksum, size if kind == "-" else 0))
        return found

    def read(self, checksum: str) -> Iterator[bytes]:
        """A regular file's bytes, in pieces of at most 1 MiB."""
        path = object_path(self.repo, checksum, "filez")
        with path.open("rb") as handle:
            length = int.from_bytes(handle.read(4), "big")
            handle.seek(8 + length)
            inflater = zlib.decompressobj(-zlib.MAX_WBITS)
            while chunk := handle.read(1 << 20):
                yield inflater.decompress(chunk)
            yield inflater.flush()

    def _header(self, checksum: str) -> tuple[int, int, int, int, str, Xattrs]:
        path = object_path(self.repo, checksum, "filez")
        try:
            with path.open("rb") as handle:
                length = int.from_bytes(handle.read(4), "big")
                handle.read(4)
                header = handle.read(length)
            decoded: Any = gvariant.decode(HEADER_TYPE, header, "big")
            size, uid, gid, mode, _, target, xattrs = decoded
        except (OSError, GVariantError, ValueError) as exc:
            raise BuildError(f"{self.repo}: content object {checksum[:12]} of commit "
                             f"{self.commit[:12]} cannot be read: {exc}",
                             hint="run `ostree fsck` on the repository") from exc
        return int(size), int(uid), int(gid), int(mode), str(target), _xattrs(xattrs)

    def _dirmeta(self, checksum: str) -> tuple[int, int, int, Xattrs]:
        path = object_path(self.repo, checksum, "dirmeta")
        try:
            decoded: Any = gvariant.decode(DIRMETA_TYPE, path.read_bytes(), "big")
            uid, gid, mode, xattrs = decoded
        except (OSError, GVariantError, ValueError) as exc:
            raise BuildError(f"{self.repo}: directory metadata {checksum[:12]} of commit "
                             f"{self.commit[:12]} cannot be read: {exc}") from exc
        return int(uid), int(gid), int(mode), _xattrs(xattrs)


def _xattrs(value: object) -> Xattrs:
    """ostree's a(ayay), names without their trailing NUL, sorted by name."""
    pairs = []
    for name, data in value:  # type: ignore[attr-defined]
        pairs.append((bytes(name).rstrip(b"\0").decode("utf-8", "surrogateescape"),
                      bytes(data)))
    return tuple(sorted(pairs))
