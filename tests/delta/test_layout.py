"""Which objects a delta carries, how, and in which parts (builder/delta/layout.py): the
same objects make the same parts wherever they travel."""

from __future__ import annotations

import hashlib

from builder.core.ostree import TreeEntry
from builder.delta.layout import Encoder, Item, PartPlan, bsdiff_memory, plan_parts
from builder.delta.objects import DIRMETA, DIRTREE, FILE

ENCODER = Encoder(own_part_bytes=1_000_000, part_target_bytes=50_000, part_max_bytes=200_000)


def checksum(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def file(path: str, size: int, content: str | None = None, mode: int = 0o100644) -> TreeEntry:
    return TreeEntry("-", path, checksum(content or path), size, mode)


def directory(path: str, tree: str) -> TreeEntry:
    return TreeEntry("d", path, checksum("tree:" + tree), 0, 0o40755, checksum("meta"))


def kinds(parts: list[PartPlan]) -> dict[str, str]:
    return {item.path: item.kind for part in parts for item in part.items}


def test_only_what_the_from_commit_lacks_travels_and_modified_files_as_bsdiff() -> None:
    old = [directory("/", "1"), file("/usr/bin/tool", 3_000_000, "tool 1"),
           file("/etc/motd", 10, "motd"), file("/usr/lib/libsecret.so", 900, "s1", 0o100600)]
    new = [directory("/", "2"), file("/usr/bin/tool", 3_000_100, "tool 2"),
           file("/etc/motd", 10, "motd"), file("/usr/lib/libsecret.so", 910, "s2", 0o100600),
           file("/usr/share/new.bin", 5000, "new")]
    parts = plan_parts(old, new, ENCODER)
    carried = kinds(parts)
    assert carried == {"/": "metadata", "/usr/bin/tool": "bsdiff",
                       "/usr/lib/libsecret.so": "whole",  # its old file is not world-readable
                       "/usr/share/new.bin": "whole"}
    tool = next(i for p in parts for i in p.items if i.path == "/usr/bin/tool")
    assert (tool.source, tool.source_size) == (checksum("tool 1"), 3_000_000)
    # The unchanged dirmeta is not carried again; the new dirtree is.
    assert [i.objtype for p in parts for i in p.items if i.objtype != FILE] == [DIRTREE]


def test_a_large_object_travels_alone_and_small_ones_share_parts() -> None:
    new = [directory("/", "r"), file("/big", 2_000_000),
           *(file(f"/small/{n}", 1000) for n in range(300))]
    parts = plan_parts([], new, ENCODER)
    assert PartPlan((Item(FILE, checksum("/big"), 2_000_000, path="/big"),)) in parts
    small = [p for p in parts if p.items[0].path.startswith("/small/")]
    assert sum(len(p.items) for p in small) == 300
    assert 1 < len(small) < 300
    assert all(p.size <= ENCODER.part_max_bytes for p in small)
    metadata = [p for p in parts if p.items[0].objtype in (DIRTREE, DIRMETA)]
    assert all(i.objtype != FILE for p in metadata for i in p.items)  # never mixed


def test_objects_two_paths_share_make_the_same_parts() -> None:
    """A from-scratch delta of two images that both carry one layer: the layer's run of
    objects is cut alike in both, whatever comes before it."""
    layer = [file(f"/usr/share/containers/layer/f{n}", 800 + n * 7) for n in range(400)]
    one = plan_parts([], [file("/a/only-in-one", 30_000), *layer], ENCODER)
    two = plan_parts([], [*(file(f"/b/{n}", 1200) for n in range(50)), *layer], ENCODER)
    shared = {p.key(ENCODER) for p in one} & {p.key(ENCODER) for p in two}
    covered = sum(len(p.items) for p in one if p.key(ENCODER) in shared)
    assert covered >= 300, f"only {covered} of the layer's 400 objects in shared parts"


def test_a_part_s_identity_is_its_objects_and_the_encoder_settings() -> None:
    item = Item(FILE, checksum("x"), 10, path="/x")
    renamed = Item(FILE, checksum("x"), 10, path="/elsewhere/x")
    assert PartPlan((item,)).key(ENCODER) == PartPlan((renamed,)).key(ENCODER)
    assert PartPlan((item,)).key(ENCODER) != PartPlan((item,)).key(Encoder(xz_preset=6))
    as_bsdiff = Item(FILE, checksum("x"), 10, source=checksum("old x"))
    assert PartPlan((item,)).key(ENCODER) != PartPlan((as_bsdiff,)).key(ENCODER)


def test_the_superblock_lists_objects_as_type_byte_and_binary_checksum() -> None:
    part = PartPlan((Item(DIRTREE, "ab" * 32, 1), Item(FILE, "cd" * 32, 1)))
    assert part.objects() == bytes([DIRTREE]) + b"\xab" * 32 + bytes([FILE]) + b"\xcd" * 32


def test_a_bsdiff_over_the_memory_limit_or_the_format_s_sizes_travels_whole() -> None:
    old = [file("/usr/bin/tool", 3_000_000, "tool 1"), file("/huge.img", 1 << 31, "img 1")]
    new = [file("/usr/bin/tool", 3_000_100, "tool 2"), file("/huge.img", 1 << 31, "img 2")]
    assert kinds(plan_parts(old, new, ENCODER)) == {"/usr/bin/tool": "bsdiff",
                                                    "/huge.img": "whole"}
    tight = bsdiff_memory(3_000_000, 3_000_100) - 1
    assert kinds(plan_parts(old, new, ENCODER, tight))["/usr/bin/tool"] == "whole"
