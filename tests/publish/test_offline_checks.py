"""What the check before `apply-offline` says about each way an offline file can be wrong:
the whole line a user reads, hint included, with the numbers taken from the delta itself
(ostree's `static-delta show`, the part files) rather than from the code under test."""

from __future__ import annotations

import hashlib
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from builder.core import gvariant
from builder.core.ostree import delta_dir
from builder.core.runner import Runner
from builder.publish.offline import (
    SUPERBLOCK_TYPE,
    OfflineDeltaError,
    apply_offline,
    check_offline_file,
    offline_name,
    write_offline_file,
)
from tests.support.deltas import NO_FALLBACK, TinyDelta, ostree, scratch_delta, tiny_delta

OTHER = "ab" * 32  # a commit no repository here holds


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyDelta:
    return tiny_delta(tmp_path_factory.mktemp("tiny") / "tiny", *NO_FALLBACK)


@pytest.fixture(scope="module")
def good(tiny: TinyDelta, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("good")
    return out / write_offline_file(tiny.delta, out / offline_name(tiny.old, tiny.new), "1").file


def rewritten(good: Path, dest: Path, change: Callable[[list[Any]], None]) -> Path:
    """`good` decoded, changed by `change`, encoded again: a well-formed superblock that
    says something else."""
    value = list(gvariant.decode(SUPERBLOCK_TYPE, good.read_bytes()))
    change(value)
    dest.write_bytes(gvariant.join(gvariant.encode(SUPERBLOCK_TYPE, tuple(value))))
    return dest


def refusal(path: Path) -> str:
    with pytest.raises(OfflineDeltaError) as caught:
        check_offline_file(path)
    return str(caught.value)


def show(repo: Path, source: str | None, head: str, field: str) -> int:
    """A number ostree itself prints about a repository delta."""
    name = f"{source}-{head}" if source else head
    found = re.search(rf"^{field}: (\d+)", ostree(repo, "static-delta", "show", name),
                      re.MULTILINE)
    assert found, field
    return int(found[1])


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    assert refusal(tmp_path / "gone.delta") == f"{tmp_path / 'gone.delta'}: no such file"


@pytest.mark.parametrize(("field", "what"), [(3, "to-commit"), (2, "from-commit")])
def test_a_commit_checksum_of_the_wrong_length_is_named(good: Path, tmp_path: Path,
                                                        field: int, what: str) -> None:
    def shorten(value: list[Any]) -> None:
        value[field] = bytes(value[field])[:31]
    bad = rewritten(good, tmp_path / good.name, shorten)
    assert refusal(bad) == f"{good.name}: {what} checksum has 31 bytes, expected 32"


def test_a_damaged_object_list_is_named(good: Path, tmp_path: Path) -> None:
    def cut(value: list[Any]) -> None:
        version, checksum, size, usize, objects = value[6][0]
        value[6] = [(version, checksum, size, usize, bytes(objects)[:-1]), *value[6][1:]]
    assert refusal(rewritten(good, tmp_path / good.name, cut)) == (
        f"{good.name}: a part's object list is damaged")


def test_a_part_in_a_newer_format_is_refused(good: Path, tmp_path: Path) -> None:
    def newer(value: list[Any]) -> None:
        value[6] = [(1, *value[6][0][1:]), *value[6][1:]]
    assert refusal(rewritten(good, tmp_path / good.name, newer)) == (
        f"{good.name}: part 0 has format version 1; this ostree applies up to 0 (hint: "
        "generate it with the fleet's ostree)")


def test_a_superblock_that_records_no_byte_order_is_read_little_endian(
        tiny: TinyDelta, good: Path, tmp_path: Path) -> None:
    """ostree's reader assumes the host's (little) order when the key is missing."""
    def unrecorded(value: list[Any]) -> None:
        value[0] = [(key, v) for key, v in value[0] if key != "ostree.endianness"]
    checked = check_offline_file(rewritten(good, tmp_path / good.name, unrecorded))
    assert (checked.to_commit, checked.parts) == (tiny.new, 1)


def test_metadata_this_code_does_not_know_is_passed_over_as_ostree_does(
        tiny: TinyDelta, good: Path, tmp_path: Path) -> None:
    """A newer ostree may record more in the superblock's metadata (here a byte saying "B"
    before `ostree.endianness`); ostree looks its keys up by name, and so must the check,
    or it would read a little-endian file's part headers big-endian and refuse it."""
    def newer(value: list[Any]) -> None:
        value[0] = [("ostree.newer-flag", gvariant.Variant("y", b"B")), *value[0]]
    file = rewritten(good, tmp_path / good.name, newer)
    checked = check_offline_file(file)
    assert (checked.from_commit, checked.to_commit, checked.parts) == (tiny.old, tiny.new, 1)
    device = tmp_path / "device"
    ostree(device, "init", "--mode=bare")
    ostree(device, "pull-local", str(tiny.repo), tiny.old)
    assert apply_offline(Runner(), device, file) == tiny.new  # ostree applies it too


@pytest.mark.parametrize("endianness", ["l", "B"])
def test_fallback_entries_are_counted_as_ostree_counts_them(tmp_path: Path,
                                                            endianness: str) -> None:
    tiny = tiny_delta(tmp_path / "fallback", "--min-fallback-size=1",
                      f"--set-endianness={endianness}")
    file = tmp_path / offline_name(tiny.old, tiny.new)
    shutil.copyfile(tiny.inline, file)  # `static-delta generate --inline` of that delta
    count = show(tiny.repo, tiny.old, tiny.new, "Number of fallback entries")
    size = show(tiny.repo, tiny.old, tiny.new, "Total Fallback Size")
    assert refusal(file) == (
        f"{file.name}: cannot be applied offline: it leaves {count} objects ({size} bytes) "
        "to be fetched over HTTP (fallback entries) (hint: regenerate it with `python -m "
        "builder deltas`, which writes no fallback entries)")


def test_each_part_of_a_delta_in_several_parts_is_checked(tiny: TinyDelta,
                                                          tmp_path: Path) -> None:
    repo = tiny_delta(tmp_path / "chunks", *NO_FALLBACK, "--max-chunk-size=1").repo
    parts = show(repo, tiny.old, tiny.new, "Number of parts")
    assert parts == 2
    delta = delta_dir(repo, tiny.old, tiny.new)
    written = write_offline_file(delta, tmp_path / offline_name(tiny.old, tiny.new), "1")
    assert written.parts == parts
    device = tmp_path / "device"
    ostree(device, "init", "--mode=bare")
    ostree(device, "pull-local", str(tiny.repo), tiny.old)
    assert apply_offline(Runner(), device, tmp_path / written.file) == tiny.new
    # The last byte of the file is inside the last part.
    file = tmp_path / written.file
    data = bytearray(file.read_bytes())
    last = (delta / "1").read_bytes()
    at = data.rindex(last) + len(last) - 1
    data[at] ^= 0xFF
    file.write_bytes(bytes(data))
    assert refusal(file) == (
        f"{file.name}: part 1 is damaged: its sha256 or size differs from the superblock's "
        f"{hashlib.sha256(last).hexdigest()[:12]} ({len(last)} bytes) (hint: copy it again)")


class ApplyingNothing(Runner):
    """An ostree whose `apply-offline` exits 0 having written nothing (the tool-runner
    seam; every other command runs for real)."""

    def run(self, argv: Any, **kwargs: Any) -> Any:
        if "apply-offline" in [str(a) for a in argv]:
            argv = ["true"]
        return super().run(argv, **kwargs)


def test_an_apply_that_delivers_no_commit_is_not_believed(tiny: TinyDelta, good: Path,
                                                          tmp_path: Path) -> None:
    device = tmp_path / "device"
    ostree(device, "init", "--mode=bare")
    ostree(device, "pull-local", str(tiny.repo), tiny.old)
    with pytest.raises(OfflineDeltaError) as caught:
        apply_offline(ApplyingNothing(), device, good)
    assert str(caught.value) == (f"after applying {good.name}, {device} lacks commit "
                                 f"{tiny.new}")


@pytest.fixture(scope="module")
def scratch(tiny: TinyDelta, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """empty-NEW.delta: the file for a device that holds none of the fleet's commits."""
    root = tmp_path_factory.mktemp("scratch")
    repo = scratch_delta(root / "scratch", *NO_FALLBACK).repo
    return root / write_offline_file(delta_dir(repo, None, tiny.new),
                                     root / offline_name(None, tiny.new), None).file


@pytest.mark.parametrize("case", [
    ("good", None, "new"),    # a delta from old named as one from scratch
    ("good", OTHER, "new"),   # ... as one from another commit
    ("good", "old", OTHER),   # ... as one to another commit
    ("scratch", "old", "new"),  # a delta from scratch named as one from old
])
def test_a_renamed_file_says_what_its_name_and_its_content_say(
        tiny: TinyDelta, good: Path, scratch: Path, tmp_path: Path,
        case: tuple[str, str | None, str]) -> None:
    which, name_from, name_to = case
    commits = {"old": tiny.old, "new": tiny.new, OTHER: OTHER}
    source = commits[name_from] if name_from else None
    renamed = tmp_path / offline_name(source, commits[name_to])
    shutil.copyfile(good if which == "good" else scratch, renamed)
    holds = tiny.old[:12] if which == "good" else "empty"
    assert refusal(renamed) == (
        f"{renamed.name}: the name says {(source or 'empty')[:12]} -> "
        f"{commits[name_to][:12]} but the file holds {holds} -> {tiny.new[:12]} (hint: was "
        "it renamed? name it FROM-TO.delta)")
