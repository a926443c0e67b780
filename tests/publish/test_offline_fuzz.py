"""Offline delta files as they arrive on a USB stick: truncated, with bytes flipped, with junk
inserted. `check_offline_file` (what `apply-delta` runs before ostree touches the device)
passes only the file ostree wrote and names what is wrong with any other, never a traceback."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from builder.publish.offline import (
    OfflineDeltaError,
    check_offline_file,
    offline_name,
    write_offline_file,
)
from tests.support.deltas import NO_FALLBACK, TinyDelta, tiny_delta


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> tuple[TinyDelta, bytes]:
    tiny = tiny_delta(tmp_path_factory.mktemp("tiny") / "tiny", *NO_FALLBACK)
    folder = tmp_path_factory.mktemp("offline")
    written = write_offline_file(tiny.delta, folder / offline_name(tiny.old, tiny.new), "1")
    return tiny, (folder / written.file).read_bytes()


@st.composite
def damaged(draw: st.DrawFn, data: bytes) -> bytes:
    kind = draw(st.sampled_from(("truncate", "flip", "insert", "replace")))
    if kind == "truncate":
        return data[:draw(st.integers(0, len(data) - 1))]
    at = draw(st.integers(0, len(data) - 1))
    if kind == "flip":
        return data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1:]
    junk = draw(st.binary(min_size=1, max_size=32))
    if kind == "insert":
        return data[:at] + junk + data[at:]
    return data[:at] + junk + data[at + len(junk):]


@pytest.mark.fuzz
@given(data=st.data())
def test_a_damaged_file_is_refused_with_what_is_wrong(original: tuple[TinyDelta, bytes],
                                                      data: st.DataObject) -> None:
    tiny, good = original
    bad = data.draw(damaged(good))
    path = Path(tempfile.mkdtemp(prefix="usb-")) / offline_name(tiny.old, tiny.new)
    path.write_bytes(bad)
    try:
        check_offline_file(path)
    except OfflineDeltaError as exc:
        assert str(exc).startswith(f"{path.name}: ") and "\n" not in str(exc), str(exc)
        return
    # Accepted: then the change was in bytes ostree does not read either (padding of the
    # superblock's variant); the parts, their checksums and the commits are what they were.
    checked = check_offline_file(path)
    assert (checked.from_commit, checked.to_commit) == (tiny.old, tiny.new)
    assert len(bad) == len(good), "a truncated or grown file never passes"
