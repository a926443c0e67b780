"""bsdiff streams in the format ostree's BSPATCH applies (builder/delta/_bsdiff.c): the
format pinned by hand-made streams, round trips on edited files, bad streams refused."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from builder.core.errors import BuildError
from builder.delta import bsdiff


def offset(value: int) -> bytes:
    """bsdiff's 8-byte integer: little-endian magnitude, the sign in the top bit."""
    raw = bytearray(abs(value).to_bytes(8, "little"))
    if value < 0:
        raw[7] |= 0x80
    return bytes(raw)


def triple(diff: int, extra: int, seek: int) -> bytes:
    return offset(diff) + offset(extra) + offset(seek)


def edited(data: bytes, seed: int, edits: int) -> bytes:
    rnd = random.Random(seed)
    out = bytearray(data)
    for _ in range(edits):
        at = rnd.randrange(len(out) + 1)
        choice = rnd.random()
        if choice < 0.4:
            out[at:at] = rnd.randbytes(rnd.randint(1, 40))
        elif choice < 0.7:
            del out[at:at + rnd.randint(1, 40)]
        else:
            out[at:at + 8] = bytes((b + 1) % 256 for b in out[at:at + 8])
    return bytes(out)


def test_a_hand_made_stream_applies_as_ostree_reads_it() -> None:
    """Diff bytes are added to the old file from the current position, extra bytes copied,
    then the old position moves by the seek (here back by 3, a negative number)."""
    old = b"abcdefgh"
    stream = (triple(3, 2, -3) + bytes([1, 1, 1]) + b"XY"
              + triple(2, 0, 0) + bytes([0, 0]))
    assert bsdiff.patch(old, stream, 7) == b"bcdXYab"


def test_an_empty_old_file_gives_one_triple_of_extra_bytes() -> None:
    assert bsdiff.diff(b"", b"new") == triple(0, 3, 0) + b"new"
    assert bsdiff.diff(b"old", b"") == b""


@pytest.mark.parametrize("seed", range(6))
def test_edited_files_round_trip_and_cost_less_than_they_weigh(seed: int) -> None:
    old = random.Random(seed).randbytes(200_000)
    new = edited(old, seed, 30)
    stream = bsdiff.diff(old, new, threads=2, segment_bytes=50_000)
    assert bsdiff.patch(old, stream, len(new)) == new
    # Diff bytes are mostly zeros where the files agree: the stream compresses to little.
    import lzma
    assert len(lzma.compress(stream)) < len(new) // 10


def test_the_stream_does_not_depend_on_the_number_of_threads() -> None:
    old = random.Random(7).randbytes(3_000_000)
    new = edited(old, 7, 100)
    streams = {bsdiff.diff(old, new, threads=t, segment_bytes=400_000) for t in (1, 2, 5)}
    assert len(streams) == 1


@given(st.binary(max_size=3000), st.integers(0, 2**32), st.integers(0, 30),
       st.sampled_from([1, 17, 1000, 1 << 24]))
def test_any_pair_round_trips(old: bytes, seed: int, edits: int, segment: int) -> None:
    new = edited(old, seed, edits) if old else random.Random(seed).randbytes(edits * 10)
    stream = bsdiff.diff(old, new, threads=3, segment_bytes=segment)
    assert bsdiff.patch(old, stream, len(new)) == new


@pytest.mark.parametrize(("stream", "size", "problem"), [
    (triple(3, 2, 0)[:20], 5, "ends inside a control triple"),
    (triple(3, 0, 0) + b"\0", 3, "ends inside diff bytes"),
    (triple(2, 3, 0) + b"\0\0" + b"ab", 4, "extra bytes run past"),
    (triple(2, 2, 0) + b"\0\0" + b"a", 4, "ends inside extra bytes"),
    (triple(-1, 0, 0), 2, "out of range"),
    (triple(3, 0, 0), 2, "out of range"),
    (triple(2, 0, 0) + b"\0\0" + b"more", 2, "left over"),
])
def test_a_bad_stream_is_refused_with_what_is_wrong(stream: bytes, size: int,
                                                     problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        bsdiff.patch(b"abcdef", stream, size)


def test_diff_refuses_nonsense_arguments() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        bsdiff.diff(b"a", b"b", threads=0)


def test_a_missing_extension_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bsdiff, "_bsdiff", None)
    monkeypatch.setattr(bsdiff, "_IMPORT_ERROR", "No module named 'builder.delta._bsdiff'",
                        raising=False)
    with pytest.raises(BuildError, match="not built") as raised:
        bsdiff.diff(b"a", b"b")
    assert "pip install -e ." in str(raised.value)
