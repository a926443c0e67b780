"""The test cache (tests/support/cache.py): a cached input is what its builder makes, made once
per key, and a test only ever gets a copy of it."""

from __future__ import annotations

from pathlib import Path

from tests.support.cache import cached_copy, sources_digest
from tests.support.deltas import NO_FALLBACK, make_tiny_delta, ostree, tiny_delta


def test_an_entry_is_built_once_per_input_and_handed_out_as_a_copy(tmp_path: Path) -> None:
    built: list[tuple[Path, tuple[str, ...]]] = []

    def _note(root: Path, *inputs: str) -> None:
        built.append((root, inputs))
        (root / "made").write_text(" ".join(inputs))

    cache = tmp_path / "cache"
    first = cached_copy(tmp_path / "first", _note, "a", tools=(), cache=cache)
    (first / "made").write_text("changed by a test")
    second = cached_copy(tmp_path / "second", _note, "a", tools=(), cache=cache)
    other = cached_copy(tmp_path / "other", _note, "b", tools=(), cache=cache)
    assert [inputs for _, inputs in built] == [("a",), ("b",)]
    assert (second / "made").read_text() == "a" and (other / "made").read_text() == "b"
    assert not any(root.exists() for root, _ in built)  # drafts were renamed into place
    [generation] = cache.iterdir()
    assert generation.name == sources_digest() and len(list(generation.iterdir())) == 2


def test_entries_made_by_other_sources_are_removed_with_the_first_new_one(
        tmp_path: Path) -> None:
    """An edit of tests/support/ makes every entry again; the old ones must not pile up."""
    cache = tmp_path / "cache"
    stale = cache / ("0" * 16) / "tiny-1234"
    stale.mkdir(parents=True)
    cached_copy(tmp_path / "copy", _made, "a", tools=(), cache=cache)
    assert [p.name for p in cache.iterdir()] == [sources_digest()]


def _made(root: Path, *inputs: str) -> None:
    (root / "made").write_text(" ".join(inputs))


def test_a_cached_tiny_delta_is_the_one_make_tiny_delta_makes(tmp_path: Path) -> None:
    cached = tiny_delta(tmp_path / "cached", *NO_FALLBACK)
    made = make_tiny_delta(tmp_path / "made", *NO_FALLBACK)
    assert (cached.old, cached.new) == (made.old, made.new)
    assert sorted(p.name for p in cached.delta.iterdir()) == \
        sorted(p.name for p in made.delta.iterdir())
    assert (cached.delta / "0").read_bytes() == (made.delta / "0").read_bytes()
    assert ostree(cached.repo, "cat", cached.new, "/usr/etc/motd") == "release 2\n"
