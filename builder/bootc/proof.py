"""The equality proof: the image, read back from its layers, is the commit.

Every path of the commit, mapped as builder/bootc/tree.py says the image differs (`/usr/etc`
as `/etc`, the image store moved, /var as tmpfiles.d entries), must be in the image with the
same kind, mode, owner, extended attributes and content (sha256 of the bytes, or the link's
target); every other path of the image must be one this build added for bootc. The layers
are read back from the written blobs, so what is proved is what a registry will serve.
"""

from __future__ import annotations

import hashlib
import tarfile
from collections.abc import Iterable
from typing import Any

from builder.bootc.oci import XATTR, Layout
from builder.bootc.tree import REPLACED, STORAGE_CONF, CommitTree, Node, moved, storage_conf
from builder.core.errors import BuildError

Seen = tuple[str, int, int, int, tuple[tuple[str, bytes], ...], str]
SHOWN = 5


def prove(layout: Layout, manifest_digest: str, commit_nodes: list[Node], tree: CommitTree,
          image_nodes: list[Node]) -> dict[str, Any]:
    """What the proof compared; raises naming the first differences."""
    image = read_back(layout, manifest_digest)
    expected: dict[str, Seen] = {}
    for node in commit_nodes:
        if node.path in ("", *REPLACED) or node.path.startswith("var/"):
            continue  # the root is no layer's; /var is made by tmpfiles.d at boot
        expected[moved(node.path)] = _expected(node, tree)
    added = {n.path for n in image_nodes if n.path not in expected}
    problems = []
    for path, seen in sorted(expected.items()):
        got = image.get(path)
        if got is None:
            problems.append(f"/{path} is in the commit, not in the image")
        elif got != seen:
            problems.append(f"/{path}: {_difference(seen, got)}")
    for path in sorted(set(image) - set(expected) - added):
        problems.append(f"/{path} is in the image, not in the commit")
    if problems:
        shown = "; ".join(problems[:SHOWN])
        more = f" (and {len(problems) - SHOWN} more)" if len(problems) > SHOWN else ""
        raise BuildError(f"equality proof failed for {manifest_digest[:19]}: {shown}{more}",
                         hint="the image must be the commit's tree; this is a builder bug")
    moved_paths = sum(1 for n in commit_nodes if moved(n.path) != n.path)
    return {"paths": len(expected), "mapped": moved_paths, "added": len(added),
            "var_entries": sum(1 for n in commit_nodes if n.path.startswith("var/"))}


def read_back(layout: Layout, manifest_digest: str) -> dict[str, Seen]:
    """Every path the image's layers hold, as its last layer leaves it."""
    manifest = layout.read_json(manifest_digest)
    found: dict[str, Seen] = {}
    for layer in manifest.get("layers", []):
        for info, data in layout.members(str(layer["digest"])):
            found[info.name.rstrip("/")] = _seen(info, data)
    return found


def _seen(info: tarfile.TarInfo, data: bytes | None) -> Seen:
    xattrs = tuple(sorted((key[len(XATTR):], value.encode("utf-8", "surrogateescape"))
                          for key, value in info.pax_headers.items()
                          if key.startswith(XATTR)))
    kind = "d" if info.isdir() else "l" if info.issym() else "-" if info.isreg() else "?"
    body = info.linkname if info.issym() else \
        hashlib.sha256(data).hexdigest() if data is not None else ""
    return kind, info.mode, info.uid, info.gid, xattrs, body


def _expected(node: Node, tree: CommitTree) -> Seen:
    if node.kind == "l":
        body = node.target
    elif node.kind == "-":
        pieces: Iterable[bytes] = tree.read(node.checksum)
        if moved(node.path) == STORAGE_CONF:
            pieces = [storage_conf(b"".join(pieces).decode()).encode()]
        digest = hashlib.sha256()
        for piece in pieces:
            digest.update(piece)
        body = digest.hexdigest()
    else:
        body = ""
    return node.kind, node.mode, node.uid, node.gid, node.xattrs, body


def _difference(commit: Seen, image: Seen) -> str:
    names = ("kind", "mode", "uid", "gid", "xattrs", "content")
    for name, want, got in zip(names, commit, image, strict=True):
        if want != got:
            if name == "mode":
                return f"mode {want:04o} in the commit, {got:04o} in the image"
            if name == "content":
                return f"content sha256 {str(want)[:12]} in the commit, {str(got)[:12]} in " \
                       "the image"
            return f"{name} {want!r} in the commit, {got!r} in the image"[:300]
    return "differs"
