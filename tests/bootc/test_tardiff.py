"""tar-diff layer deltas (builder/bootc/tardiff.py): made with the builder's bsdiff and the
real zstd, applied back byte for byte, read as containers/tar-diff's file-format.md says,
and refused when hostile."""

from __future__ import annotations

import hashlib
import io
import os
import random
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builder.bootc import tardiff
from builder.core.runner import Runner
from tests.support import requires

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _zstd() -> None:
    requires.need_tools("zstd", "tar")

RNG = random.Random(7)
BINARY = RNG.randbytes(400_000)


def _trees(tmp_path: Path) -> tuple[Path, bytes]:
    """An old image's files, and a new layer: a patched binary, a file moved, an image
    store's layer directory renamed with one of its files changed, new and tiny files, a
    symlink, a hard link and a path longer than ustar allows."""
    old, new = tmp_path / "old", tmp_path / "new"
    files_old = {"usr/bin/tool": BINARY, "usr/share/doc/readme": b"read me\n" * 200,
                 "usr/lib/storage/overlay/aaaa/diff/usr/bin/sh": BINARY[::-1]}
    long_dir = "usr/lib/" + "/".join(["deep"] * 30)
    files_new = {"usr/bin/tool": BINARY[:5000] + b"patched" + BINARY[5000:],
                 "usr/share/doc/moved-readme": b"read me\n" * 200,
                 "usr/lib/storage/overlay/bbbb/diff/usr/bin/sh":
                     BINARY[::-1][:9000] + b"!" + BINARY[::-1][9001:],
                 "usr/bin/fresh": RNG.randbytes(3000), "usr/bin/tiny": b"hi\n",
                 f"{long_dir}/file": b"deep" * 100}
    for root, files in ((old, files_old), (new, files_new)):
        for name, data in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)
    os.symlink("tool", new / "usr/bin/link")
    os.link(new / "usr/bin/tool", new / "usr/bin/tool-hardlink")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(new.rglob("*")):
            tar.add(path, arcname=path.relative_to(new).as_posix(), recursive=False)
    return old, buffer.getvalue()


def _delta_of(ops: bytes) -> bytes:
    packed = Runner().run(["zstd", "-q", "-c", "-"], input=ops).stdout
    return tardiff.HEADER + packed


def _op(code: int, size: int, data: bytes = b"") -> bytes:
    varint = bytearray()
    while size >= 0x80:
        varint.append(size & 0x7F | 0x80)
        size >>= 7
    varint.append(size)
    return bytes([code]) + bytes(varint) + data


def test_a_layer_is_rebuilt_byte_for_byte_from_a_delta_far_smaller_than_it(
        tmp_path: Path) -> None:
    old, layer = _trees(tmp_path)
    delta, stats = tardiff.make(layer, tardiff.index_sources(old), Runner())
    out = io.BytesIO()
    size, digest = tardiff.apply(delta, old, out, Runner())
    assert out.getvalue() == layer and size == len(layer)
    assert digest == "sha256:" + hashlib.sha256(layer).hexdigest()
    # The moved readme is copied, the patched binary and the renamed store's shell diffed
    # (the hard link is a header), the random new file sent as it is.
    assert stats.files == {"copied": 1, "diffed": 2, "literal": 2}
    assert stats.copied + stats.diffed + stats.literal == len(layer)
    assert delta.startswith(b"tardf1\n\x00")
    assert len(layer) > 800_000 and len(delta) < 7_000   # 3,000 of them random


def test_the_applier_reads_the_ops_as_the_file_format_defines_them(tmp_path: Path) -> None:
    """A stream written by hand from containers/tar-diff's file-format.md."""
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir/source").write_bytes(b"0123456789")
    ops = (_op(tardiff.DATA, 3, b"abc") + _op(tardiff.OPEN, 10, b"dir/source")
           + _op(tardiff.COPY, 4)                            # 0123
           + _op(tardiff.ADD_DATA, 2, bytes([1, 255]))        # '4'+1, '5'-1
           + _op(tardiff.SEEK, 1) + _op(tardiff.COPY, 2)     # 12
           + _op(tardiff.OPEN, 10, b"dir/source") + _op(tardiff.COPY, 1))  # position 0
    out = io.BytesIO()
    tardiff.apply(_delta_of(ops), tmp_path, out, Runner())
    assert out.getvalue() == b"abc0123" + b"54" + b"12" + b"0"


@pytest.mark.parametrize(("ops", "expected"), [
    (_op(tardiff.OPEN, 13, b"../etc/passwd"), "not a plain relative path"),
    (_op(tardiff.OPEN, 11, b"/etc/passwd"), "not a plain relative path"),
    (_op(tardiff.OPEN, 7, b"outside"), "is not a regular file of the old image"),
    (_op(tardiff.OPEN, 7, b"missing"), "is not a regular file of the old image"),
    (_op(tardiff.OPEN, 6, b"source") + _op(tardiff.COPY, 11), "reads past the end of source"),
    (_op(tardiff.COPY, 1), "reads a source before any is opened"),
    (_op(9, 0), "unknown op 9"),
    (_op(tardiff.DATA, tardiff.MAX_OP + 1), f"at most {tardiff.MAX_OP}"),
    (_op(tardiff.DATA, 10, b"short"), "ends inside an op's data"),
    (bytes([tardiff.DATA, 0x80]), "ends inside an op's size"),
])
def test_a_hostile_delta_is_refused_with_one_line(tmp_path: Path, ops: bytes,
                                                  expected: str) -> None:
    root = tmp_path / "old"
    root.mkdir()
    (root / "source").write_bytes(b"0123456789")
    (tmp_path / "secret").write_bytes(b"not the image's")
    (root / "outside").symlink_to(tmp_path / "secret")
    with pytest.raises(tardiff.BadDelta) as caught:
        tardiff.apply(_delta_of(ops), root, io.BytesIO(), Runner(), what="update.delta")
    message = str(caught.value)
    assert message.startswith("update.delta: ") and expected in message
    assert "\n" not in message


def test_a_file_that_is_no_tar_diff_is_named(tmp_path: Path) -> None:
    with pytest.raises(tardiff.BadDelta, match="not a tar-diff"):
        tardiff.apply(b"PK\x03\x04 a zip", tmp_path, io.BytesIO(), Runner())
    with pytest.raises(tardiff.BadDelta, match="does not decompress"):
        tardiff.apply(tardiff.HEADER + b"garbage", tmp_path, io.BytesIO(), Runner())


def test_a_rebuilt_layer_with_another_diff_id_is_refused_and_removed(tmp_path: Path) -> None:
    old, layer = _trees(tmp_path)
    delta, _ = tardiff.make(layer, tardiff.index_sources(old), Runner())
    (old / "usr/bin/tool").write_bytes(BINARY[:-1] + b"X")   # the device's copy differs
    out = tmp_path / "layer.tar"
    wanted = "sha256:" + hashlib.sha256(layer).hexdigest()
    with pytest.raises(tardiff.BadDelta, match=f"not the image's {wanted}"):
        tardiff.rebuild_layer(delta, old, wanted, out, Runner(), what="layer 3")
    assert not out.exists()


EDITS = st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 40), st.binary(max_size=40)),
                 max_size=6)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.binary(min_size=0, max_size=4000), edits=EDITS, same_path=st.booleans(),
       extra=st.binary(max_size=300))
def test_any_edit_of_any_file_round_trips(tmp_path_factory: pytest.TempPathFactory,
                                          base: bytes, edits: list[tuple[int, int, bytes]],
                                          same_path: bool, extra: bytes) -> None:
    """Whatever the old and new contents, the rebuilt layer is the new one, byte for byte."""
    root = tmp_path_factory.mktemp("old")
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/old-name").write_bytes(base)
    new = bytearray(base)
    for offset, cut, insert in edits:
        at = min(offset, len(new))
        new[at:at + cut] = insert
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in ((f"usr/bin/{'old-name' if same_path else 'x/old-name'}", new),
                           ("usr/share/extra", extra)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(bytes(data)))
    layer = buffer.getvalue()
    delta, _ = tardiff.make(layer, tardiff.index_sources(root), Runner())
    out = io.BytesIO()
    tardiff.apply(delta, root, out, Runner())
    assert out.getvalue() == layer


def test_a_sparse_member_goes_as_it_is_stored(tmp_path: Path) -> None:
    """GNU tar stores a sparse file's data runs only: its header's size is not the bytes
    that follow it, so it is sent as stored (this project's layers have none; others may)."""
    new = tmp_path / "new"
    new.mkdir()
    with (new / "sparse").open("wb") as handle:
        handle.write(BINARY[:5000])
        handle.seek(1 << 20)
        handle.write(BINARY[:5000])
    (new / "after").write_bytes(BINARY[:3000])
    layer = Runner().run(["tar", "--format=gnu", "--sparse", "-C", new, "-cf", "-",
                          "sparse", "after"]).stdout
    old = tmp_path / "old"
    old.mkdir()
    (old / "after").write_bytes(BINARY[:3000])
    delta, stats = tardiff.make(layer, tardiff.index_sources(old), Runner())
    out = io.BytesIO()
    tardiff.apply(delta, old, out, Runner())
    assert out.getvalue() == layer and stats.files["copied"] == 1


def test_a_delta_that_fails_halfway_leaves_no_partial_layer(tmp_path: Path) -> None:
    (tmp_path / "source").write_bytes(b"0123456789")
    ops = _op(tardiff.DATA, 5, b"hello") + _op(tardiff.OPEN, 6, b"source") + _op(tardiff.COPY, 99)
    out = tmp_path / "layer.tar"
    with pytest.raises(tardiff.BadDelta, match="reads past the end of source"):
        tardiff.rebuild_layer(_delta_of(ops), tmp_path, "sha256:" + "0" * 64, out, Runner(),
                              what="layer 1")
    assert not out.exists()
