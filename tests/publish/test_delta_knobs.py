"""Delta knobs per update path, ostree's modified-file pairing, and parallel generation."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from builder.core.ostree import Repo, TreeFile
from builder.core.runner import Runner
from builder.delta.pairs import similar_pairs
from builder.publish.delta_knobs import MB, PathPlan, parse_size, plan_path
from builder.publish.deltas import run_parallel
from builder.publish.encodings import delta_encodings
from builder.publish.offline import parse_superblock
from tests.support.deltas import NO_FALLBACK, tiny_delta

GB = 1 << 30


def f(path: str, checksum: str, size: int) -> TreeFile:
    return TreeFile(path, checksum * 64 if len(checksum) == 1 else checksum, size, 0o644)


def test_pairs_follow_ostree_basename_and_size_rule() -> None:
    old = [f("/usr/bin/microshift", "a", 96_000_000),
           f("/usr/share/containers/storage/overlay/1/diff/lib/libarrow.so.1500", "b", 61_000_000),
           f("/usr/lib/libfoo.so.1", "c", 1000), f("/usr/lib/data.xz", "d", 5000),
           f("/usr/lib/other.txt", "e", 100)]
    new = [f("/usr/bin/microshift", "1", 96_000_000),  # same path: modified
           # the same library in a rebuilt layer directory: modified (basename match)
           f("/usr/share/containers/storage/overlay/2/diff/lib/libarrow.so.1500", "2", 61_100_000),
           f("/usr/lib/libfoo.so.2", "3", 1100),        # fuzzy: 'libfoo' before the first dot
           f("/usr/lib/data.xz", "4", 5000),            # .xz: never a delta candidate
           f("/usr/lib/other.txt", "5", 1000),          # 10x the size: not similar
           f("/usr/lib/other.txt", "e", 100)]           # unchanged: not new at all
    pairs = {p.new.path: p.old.path for p in similar_pairs(old, new)}
    assert pairs == {
        "/usr/bin/microshift": "/usr/bin/microshift",
        "/usr/share/containers/storage/overlay/2/diff/lib/libarrow.so.1500":
            "/usr/share/containers/storage/overlay/1/diff/lib/libarrow.so.1500",
        "/usr/lib/libfoo.so.2": "/usr/lib/libfoo.so.1"}


def test_a_96MB_executable_gets_a_bsdiff_size_over_ostrees_default() -> None:
    old = [f("/usr/bin/microshift", "a", 95_802_128)]
    new = [f("/usr/bin/microshift", "b", 95_802_128)]
    plan = plan_path("f" * 64, old, new, ceiling=12 * GB)
    assert plan.max_bsdiff_mb * MB >= 2 * 95_802_128 > 128 * MB  # ostree's default: whole
    assert "--min-fallback-size=0" in plan.generate_args()
    assert f"--max-bsdiff-size={plan.max_bsdiff_mb}" in plan.generate_args()
    assert 1.5 * GB < plan.memory_estimate < 2 * GB  # measured: 1.62 GB
    assert not plan.over_ceiling


def test_a_pair_over_the_memory_ceiling_is_left_out_of_bsdiff_and_reported() -> None:
    old = [f("/usr/bin/small", "a", 10_000_000), f("/usr/bin/big", "b", 200_000_000)]
    new = [f("/usr/bin/small", "c", 10_000_000), f("/usr/bin/big", "d", 200_000_000)]
    plan = plan_path("f" * 64, old, new, ceiling=1 * GB)
    assert [p.new.path for p in plan.over_ceiling] == ["/usr/bin/big"]
    assert 20 <= plan.max_bsdiff_mb < 400  # the small pair still is bsdiffed
    assert plan.to_json()["bsdiff_over_ceiling"] == ["/usr/bin/big"]


def test_from_scratch_needs_no_bsdiff_and_costs_by_content() -> None:
    new = [f("/usr/bin/a", "a", 50_000_000), f("/usr/bin/b", "b", 20_000_000)]
    plan = plan_path(None, [], new, ceiling=12 * GB)
    assert not plan.pairs and plan.new_bytes == 70_000_000 and plan.largest_new == 50_000_000
    assert plan.cost > plan_path(None, [], new[1:], ceiling=12 * GB).cost


@pytest.mark.parametrize(("text", "size"), [("8G", 8 * GB), ("1500M", 1500 << 20),
                                            ("2GiB", 2 * GB), ("1024", 1024), ("0.5g", GB // 2)])
def test_memory_limits_parse(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "-1G", "0", ""])
def test_bad_memory_limits_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def _plans(estimates: list[int]) -> list[PathPlan]:
    return [plan_path(None, [], [f(f"/f{i}", str(i), size)], ceiling=64 * GB)
            for i, size in enumerate(estimates, start=1)]


def test_paths_run_in_parallel_up_to_the_jobs_longest_first() -> None:
    plans = _plans([10 * MB, 300 * MB, 100 * MB, 200 * MB])
    started: list[int] = []
    active, peak = [0], [0]
    lock = threading.Lock()

    def work(plan: PathPlan) -> int:
        with lock:
            started.append(plan.new_bytes)
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.2)
        with lock:
            active[0] -= 1
        return plan.new_bytes

    results = run_parallel(work, plans, jobs=2, ceiling=64 * GB)
    assert sorted(results.values()) == sorted(p.new_bytes for p in plans)
    assert peak[0] == 2
    assert started[:2] == [300 * MB, 200 * MB]


def test_paths_wait_while_their_memory_does_not_fit() -> None:
    plans = _plans([10 * MB, 20 * MB, 30 * MB])
    ceiling = max(p.memory_estimate for p in plans) + 1  # room for one at a time
    active, peak = [0], [0]
    lock = threading.Lock()

    def work(plan: PathPlan) -> int:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.1)
        with lock:
            active[0] -= 1
        return 0

    results = run_parallel(work, plans, jobs=3, ceiling=ceiling)
    assert peak[0] == 1
    assert sorted(results) == sorted(id(plan) for plan in plans)  # every one ran


def test_a_failing_path_fails_the_run() -> None:
    plans = _plans([10 * MB, 20 * MB])

    def work(plan: PathPlan) -> int:
        raise RuntimeError(f"boom {plan.new_bytes}")

    with pytest.raises(RuntimeError, match="boom"):
        run_parallel(work, plans, jobs=2, ceiling=64 * GB)


def test_encodings_read_from_a_real_delta(tmp_path: Path) -> None:
    tiny = tiny_delta(tmp_path / "tiny", *NO_FALLBACK)
    superblock = parse_superblock(memoryview((tiny.delta / "superblock").read_bytes()), "sb")
    encodings = delta_encodings(tiny.delta, superblock)
    repo_files = {file.path: file.checksum for file in Repo(tiny.repo, Runner()).files(tiny.new)}
    kinds = {path: encodings[checksum].kind for path, checksum in repo_files.items()}
    assert kinds["/usr/bin/tool"] in ("rollsum", "bsdiff")
    assert kinds["/usr/lib/layer-b/diff/libx.so.1"] in ("rollsum", "bsdiff")
    assert kinds["/usr/share/blob.bin"] == "whole"
    assert encodings[repo_files["/usr/share/blob.bin"]].payload_bytes == 2_000_000


def test_peak_memory_of_a_command_is_measured() -> None:
    measured = Runner().measured(["python3", "-c", "x = bytearray(300 * 1024 * 1024)"])
    assert measured.peak_rss >= 300 * 1024 * 1024
    assert measured.seconds > 0


def test_peak_memory_is_the_command_s_not_the_caller_s() -> None:
    ballast = bytearray(400 * 1024 * 1024)  # this process is large; `true` is not
    ballast[::4096] = b"x" * len(ballast[::4096])
    measured = Runner().measured(["true"])
    assert measured.peak_rss < 100 * 1024 * 1024
    del ballast


def test_a_measured_command_s_failure_is_a_tool_error() -> None:
    from builder.core.errors import ToolError

    with pytest.raises(ToolError, match="exit code 3"):
        Runner().measured(["python3", "-c", "import sys; sys.exit(3)"])


def _finished(run: Callable[[], object], seconds: float = 20) -> bool:
    """Whether run() returns within `seconds` (a scheduler that never ends must fail the
    test, not hang it)."""
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive()


def test_a_path_over_the_ceiling_still_runs_alone() -> None:
    plans = _plans([10 * MB, 300 * MB])
    ceiling = min(p.memory_estimate for p in plans)  # the larger one never fits
    results: dict[int, int] = {}
    assert _finished(lambda: results.update(
        run_parallel(lambda plan: plan.new_bytes, plans, jobs=2, ceiling=ceiling)))
    assert sorted(results.values()) == [10 * MB, 300 * MB]


def test_paths_whose_estimates_fill_the_ceiling_exactly_run_together() -> None:
    plans = _plans([10 * MB, 20 * MB])
    together = threading.Barrier(2, timeout=10)

    def work(plan: PathPlan) -> bool:
        try:
            together.wait()  # each waits for the other to be running
        except threading.BrokenBarrierError:
            return False
        return True

    ceiling = sum(p.memory_estimate for p in plans)
    assert list(run_parallel(work, plans, jobs=2, ceiling=ceiling).values()) == [True, True]


def test_a_new_path_starts_as_soon_as_any_running_one_ends() -> None:
    """With 2 jobs, the third path starts when the short one ends, while the long one
    still runs (it waits for the third to have started)."""
    plans = _plans([300 * MB, 10 * MB, 20 * MB])  # started longest first: 300, 20, then 10
    third_started = threading.Event()

    def work(plan: PathPlan) -> bool:
        if plan.new_bytes == 300 * MB:
            return third_started.wait(timeout=10)
        if plan.new_bytes == 10 * MB:
            third_started.set()
        return True

    results = run_parallel(work, plans, jobs=2, ceiling=64 * GB)
    assert sorted(results.values()) == [True, True, True]
