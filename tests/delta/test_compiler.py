"""Deltas from the builder's compiler (builder/delta) applied by stock ostree: pulled over
HTTP and applied offline on a repository holding the from-commit, `ostree fsck` clean,
the same tree as the archive's; sizes against ostree's own generator of the same path;
parts made once and reused."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from builder.core.ostree import Repo
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.delta.cache import PartCache
from builder.delta.compiler import CompiledDelta, DeltaRequest, compile_deltas
from builder.publish.encodings import delta_encodings
from builder.publish.offline import write_offline_file
from builder.publish.report import read_superblock
from tests.support.deltas import NO_FALLBACK, TinyDelta, ostree, signed_delta, tiny_delta
from tests.support.ostree import serve

pytestmark = pytest.mark.integration
GiB = 1 << 30


def compile_tiny(tiny: TinyDelta, cache: Path, scratch: bool = True) -> list[CompiledDelta]:
    requests = [DeltaRequest(tiny.repo, tiny.old, tiny.new),
                *([DeltaRequest(tiny.repo, None, tiny.new)] if scratch else [])]
    return compile_deltas(requests, Runner(), PartCache(cache), Progress(), jobs=2,
                          ceiling=4 * GiB)


def size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir())


def bare_repo(path: Path, source: Path | None = None, commit: str | None = None) -> Path:
    ostree(path, "init", "--mode=bare")
    if source and commit:
        ostree(path, "pull-local", str(source), commit)
    return path


def listing(repo: Path, commit: str) -> str:
    return ostree(repo, "ls", "-R", "-C", "-X", commit)


@pytest.fixture
def tiny(tmp_path: Path) -> TinyDelta:
    return tiny_delta(tmp_path / "tiny", *NO_FALLBACK)


def test_deltas_pull_over_http_with_stock_ostree(tiny: TinyDelta, tmp_path: Path) -> None:
    compile_tiny(tiny, tmp_path / "cache")
    ostree(tiny.repo, "summary", "-u")
    device = bare_repo(tmp_path / "device")
    with serve(tiny.repo) as (url, requested):
        ostree(device, "remote", "add", "--no-gpg-verify", "origin", url)
        ostree(device, "pull", "origin", tiny.old)  # no delta leads to it: plain objects
        requested.clear()
        update = ostree(device, "pull", "--require-static-deltas", "origin", tiny.new)
    assert "delta parts" in update, update
    assert any(path.endswith("/superblock") for path in requested), requested
    ostree(device, "fsck")
    assert listing(device, tiny.new) == listing(tiny.repo, tiny.new)


def test_offline_files_apply_on_a_repo_holding_the_from_commit(tiny: TinyDelta,
                                                               tmp_path: Path) -> None:
    for compiled in compile_tiny(tiny, tmp_path / "cache"):
        source = compiled.request.from_commit
        offline = write_offline_file(compiled.directory,
                                     tmp_path / f"{source or 'empty'}.delta", None)
        device = bare_repo(tmp_path / f"device-{source or 'empty'}", tiny.repo, source)
        ostree(device, "static-delta", "apply-offline", str(tmp_path / offline.file))
        ostree(device, "fsck")
        assert listing(device, tiny.new) == listing(tiny.repo, tiny.new)
        dest = tmp_path / f"checkout-{source or 'empty'}"
        ostree(device, "checkout", "-U", tiny.new, str(dest))
        assert (dest / "usr" / "etc" / "motd").read_bytes() == b"release 2\n"


def test_same_encodings_as_ostree_s_generator_and_no_larger(tiny: TinyDelta,
                                                            tmp_path: Path) -> None:
    """ostree's own delta of the path is the reference: every object it sends as a delta
    of its predecessor (bsdiff or rollsum) is a bsdiff here, and the whole is at most
    1.05x its size."""
    repo = Repo(tiny.repo, Runner())
    theirs = delta_encodings(tiny.delta, read_superblock(repo, tiny.old, tiny.new))
    their_size = size(tiny.delta)
    [ours] = compile_tiny(tiny, tmp_path / "cache", scratch=False)
    mine = delta_encodings(ours.directory, read_superblock(repo, tiny.old, tiny.new))
    assert mine.keys() == theirs.keys()
    for checksum, encoding in theirs.items():
        want = "whole" if encoding.kind == "whole" else "bsdiff"
        assert mine[checksum].kind == want, (checksum, encoding, mine[checksum])
    assert size(ours.directory) <= 1.05 * their_size, (size(ours.directory), their_size)
    assert ours.pieces.objects["bsdiff"] >= 2


def test_a_second_run_takes_every_part_from_the_cache(tiny: TinyDelta, tmp_path: Path) -> None:
    first = compile_tiny(tiny, tmp_path / "cache")
    made = {c.directory: {p.name: p.read_bytes() for p in c.directory.iterdir()}
            for c in first}
    assert all(c.pieces.cached == 0 and c.pieces.made + c.pieces.shared == c.pieces.parts
               for c in first)
    again = compile_tiny(tiny, tmp_path / "cache")
    assert all(c.pieces.cached == c.pieces.parts and c.pieces.made == 0 for c in again)
    # The same commits give the same delta, byte for byte (the superblock too).
    assert {c.directory: {p.name: p.read_bytes() for p in c.directory.iterdir()}
            for c in again} == made
    shutil.rmtree(tmp_path / "cache")
    for c in first:
        assert (c.directory / "0").is_file()  # a delta keeps its links to dropped parts


def test_a_damaged_cached_part_is_made_again(tiny: TinyDelta, tmp_path: Path) -> None:
    compile_tiny(tiny, tmp_path / "cache", scratch=False)
    parts = sorted((tmp_path / "cache").rglob("*.part"), key=lambda p: p.stat().st_size)
    parts[-1].unlink()  # the largest, as a partial CI cache restore would lose it
    leftover = tiny.repo / "tmp" / "delta-killed"  # a killed run was assembling a delta
    leftover.mkdir(parents=True)
    (leftover / "0").write_bytes(b"half")
    [again] = compile_tiny(tiny, tmp_path / "cache", scratch=False)
    assert not leftover.exists()
    assert (again.pieces.cached, again.pieces.made) == (again.pieces.parts - 1, 1)
    device = bare_repo(tmp_path / "device", tiny.repo, tiny.old)
    offline = write_offline_file(again.directory, tmp_path / "update.delta", None)
    ostree(device, "static-delta", "apply-offline", str(tmp_path / offline.file))
    ostree(device, "fsck")


def test_a_signed_commit_keeps_its_signature_through_the_delta(tmp_path: Path) -> None:
    tiny, release_key, _ = signed_delta(tmp_path / "signed", *NO_FALLBACK)
    compile_tiny(tiny, tmp_path / "cache", scratch=False)
    ostree(tiny.repo, "summary", "-u")
    device = bare_repo(tmp_path / "device", tiny.repo, tiny.old)
    with serve(tiny.repo) as (url, _):
        subprocess.run(["ostree", f"--repo={device}", "remote", "add", "--set=gpg-verify=true",
                        f"--gpg-import={release_key}", "origin", url], check=True,
                       capture_output=True)
        pulled = ostree(device, "pull", "--require-static-deltas", "origin", tiny.new)
    assert "delta parts" in pulled
    shown = ostree(device, "show", tiny.new)
    assert "Good signature" in shown or "Found 1 signature" in shown, shown
