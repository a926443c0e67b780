"""The delta part cache (builder/delta/cache.py): entries checked when taken, damaged ones
dropped, the least recently used dropped to stay within the limit."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from builder.delta.cache import PartCache


def key(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def test_a_part_put_is_taken_back_with_its_record(tmp_path: Path) -> None:
    cache = PartCache(tmp_path)
    put = cache.put(key("a"), b"x" + b"part bytes", 1234)
    got = cache.get(key("a"))
    assert got == put
    assert got is not None and got.path.read_bytes() == b"xpart bytes"
    assert got.sha256 == hashlib.sha256(b"xpart bytes").hexdigest()
    assert (got.bytes, got.uncompressed) == (11, 1234)
    assert cache.get(key("b")) is None


def test_a_damaged_or_half_written_entry_is_dropped(tmp_path: Path) -> None:
    cache = PartCache(tmp_path)
    damaged = cache.put(key("a"), b"original", 8)
    damaged.path.write_bytes(b"0riginal")  # same size, other bytes
    assert cache.get(key("a")) is None
    assert not damaged.path.exists()
    half = cache.put(key("b"), b"whole", 5)
    half.path.with_suffix(".json").unlink()  # the record is written last
    assert cache.get(key("b")) is None
    cache.put(key("c"), b"whole", 5).path.with_suffix(".json").write_text("{not json")
    assert cache.get(key("c")) is None


def test_trim_drops_the_parts_used_longest_ago(tmp_path: Path) -> None:
    cache = PartCache(tmp_path, limit=2500)
    for age, name in enumerate("abc"):
        entry = cache.put(key(name), bytes(1000), 1000)
        past = time.time() - 1000 + age * 10
        for path in (entry.path, entry.path.with_suffix(".json")):
            os.utime(path, (past, past))
    cache.get(key("a"))  # used now: the newest
    assert cache.trim() == (1, 1000)
    assert cache.get(key("b")) is None
    assert cache.get(key("a")) is not None and cache.get(key("c")) is not None
