"""Static deltas between releases: published, offline files for USB, a size report, and a
device pull over HTTP that really uses them."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from builder.core.ostree import delta_dir
from builder.publish.report import DeltaReport, UpdatePath, report_dir, transfer_seconds
from tests.support import requires
from tests.support.ostree import ComposedPair, cli, copy_build, device_repo, head, ostree, serve

F = TypeVar("F", bound=Callable[..., None])


def integration(test: F) -> F:
    """Runs real ostree/rpm/skopeo on composes, which need root."""
    marked = requires.root_only("compose runs rpm --root and keeps ownership")(test)
    return pytest.mark.integration(marked)  # type: ignore[no-any-return]


def test_transfer_time_is_payload_bits_over_link_rate() -> None:
    assert transfer_seconds(1_250_000, 10) == pytest.approx(1.0)
    assert transfer_seconds(1_250_000, 5) == pytest.approx(2.0)


def test_report_text_names_each_update_path_and_its_sizes() -> None:
    seconds = {f"{s}mbit": {"delta": 0.5, "object_pull": 1.5, "full": 3.0} for s in (5, 10)}
    path = UpdatePath("a" * 64, "4.14.2-1", 2048, 1, 0, 8192, 12, 65536, None, seconds)
    scratch = UpdatePath(None, None, 60000, 1, 0, 65536, 30, 65536, None, seconds)
    text = DeltaReport("rhel/9/x86_64/edge", "b" * 64, "4.14.3-1", "/r", (path, scratch)).text()
    assert "4.14.2-1 (aaaaaaaaaaaa)" in text
    assert "scratch (--empty)" in text
    assert "2.0 KiB" in text and "8.0 KiB" in text and "64.0 KiB" in text


@integration
def test_delta_listed_published_and_reported(composed_pair: ComposedPair) -> None:
    pair = composed_pair
    listed = ostree(f"--repo={pair.repo}", "static-delta", "list").stdout.split()
    assert f"{pair.commit1}-{pair.commit2}" in listed
    assert pair.commit2 in listed  # from scratch
    assert (delta_dir(pair.repo, pair.commit1, pair.commit2) / "superblock").is_file()
    report = json.loads((report_dir(pair.build_dir, pair.ref) / "report.json").read_text())
    assert report["to_commit"] == pair.commit2 and report["to_version"] == "4.14.3-1"
    update = next(p for p in report["paths"] if p["from_commit"] == pair.commit1)
    assert update["from_version"] == "4.14.2-1"
    assert 0 < update["delta_bytes"] < update["full_bytes"]
    assert 0 < update["object_pull_bytes"] < update["full_bytes"]
    assert update["seconds"]["5mbit"]["delta"] == pytest.approx(
        update["delta_bytes"] * 8 / 5e6, abs=1e-3)
    text = (report_dir(pair.build_dir, pair.ref) / "report.txt").read_text()
    assert pair.commit1[:12] in text
    summary = ostree(f"--repo={pair.repo}", "summary", "--view").stdout
    assert f"{pair.commit1}-{pair.commit2}" in summary  # clients find deltas via the summary


@integration
def test_device_pull_over_http_uses_the_delta(composed_pair: ComposedPair,
                                              tmp_path: Path) -> None:
    pair = composed_pair
    with serve(pair.repo) as (url, requested):
        device = device_repo(tmp_path / "device", url, pair.public_key)
        ostree(f"--repo={device}", "pull", "origin", pair.commit1)
        requested.clear()
        pulled = ostree(f"--repo={device}", "pull", "origin", pair.ref)
    assert "delta parts" in pulled.stdout
    superblock = delta_dir(Path("/"), pair.commit1, pair.commit2) / "superblock"
    assert any(path == str(superblock) for path in requested), requested
    assert head(device, f"origin:{pair.ref}") == pair.commit2
    ostree(f"--repo={device}", "fsck")


@integration
def test_offline_delta_file_applies_on_a_device_holding_the_old_commit(
        composed_pair: ComposedPair, tmp_path: Path) -> None:
    pair = composed_pair
    delta_file = report_dir(pair.build_dir, pair.ref) / f"{pair.commit1}-{pair.commit2}.delta"
    assert delta_file.is_file()
    device = tmp_path / "device"
    ostree(f"--repo={device}", "init", "--mode=bare")
    ostree(f"--repo={device}", "pull-local", pair.repo, pair.commit1)
    assert cli("apply-delta", "--repo", device, delta_file) == 0
    ostree(f"--repo={device}", "fsck")
    assert ostree(f"--repo={device}", "ls", pair.commit2, "/usr/bin/microshift").returncode == 0


@integration
def test_offline_delta_is_verified_against_the_device_remote_keys(
        composed_pair: ComposedPair, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from tests.support.keys import make_release_key

    pair = composed_pair
    delta_file = report_dir(pair.build_dir, pair.ref) / f"{pair.commit1}-{pair.commit2}.delta"
    trusting = device_repo(tmp_path / "trusting", "http://127.0.0.1:9/", pair.public_key)
    ostree(f"--repo={trusting}", "pull-local", pair.repo, pair.commit1)
    assert cli("apply-delta", "--repo", trusting, "--verify-remote", "origin", delta_file) == 0
    assert "signature verified with remote 'origin'" in capsys.readouterr().err

    homedir = tmp_path / "other-gnupg"
    make_release_key(homedir)
    other_key = tmp_path / "other.asc"
    other_key.write_bytes(subprocess.run(["gpg", "--homedir", str(homedir), "--armor",
                                          "--export"], check=True, capture_output=True).stdout)
    subprocess.run(["gpgconf", "--homedir", str(homedir), "--kill", "gpg-agent"], check=False)
    wary = device_repo(tmp_path / "wary", "http://127.0.0.1:9/", other_key)
    ostree(f"--repo={wary}", "pull-local", pair.repo, pair.commit1)
    assert cli("apply-delta", "--repo", wary, "--verify-remote", "origin", delta_file) == 1
    assert f"commit {pair.commit2[:12]} does not verify" in capsys.readouterr().err


@integration
def test_offline_delta_needs_its_source_commit(composed_pair: ComposedPair, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    pair = composed_pair
    delta_file = report_dir(pair.build_dir, pair.ref) / f"{pair.commit1}-{pair.commit2}.delta"
    device = tmp_path / "device"
    ostree(f"--repo={device}", "init", "--mode=bare")
    assert cli("apply-delta", "--repo", device, delta_file) != 0
    assert "is not in repository" in capsys.readouterr().err


@integration
def test_deltas_rerun_is_idempotent_and_from_count_limits_paths(
        composed_pair: ComposedPair, tmp_path: Path) -> None:
    build = copy_build(composed_pair.build_dir, tmp_path / "build")
    assert cli("--release", composed_pair.release2, "deltas", "--ref", composed_pair.ref,
               "--from-count", "0", "--build-dir", build) == 0
    report = json.loads((report_dir(build, composed_pair.ref) / "report.json").read_text())
    assert [p["from_commit"] for p in report["paths"]] == [None]
    assert sorted(p.name for p in report_dir(build, composed_pair.ref).glob("*.delta")) == [
        f"empty-{composed_pair.commit2}.delta"]


@integration
def test_report_says_how_each_path_was_made(composed_pair: ComposedPair) -> None:
    report = json.loads((report_dir(composed_pair.build_dir, composed_pair.ref)
                         / "report.json").read_text())
    assert report["jobs"] >= 1 and report["memory_ceiling_bytes"] > 0
    assert report["wall_seconds"] > 0
    for path in report["paths"]:
        assert path["fallback_objects"] == 0
        assert path["knobs"]["generator"] == "builder" and path["knobs"]["xz_preset"] == 8
        pieces = path["pieces"]
        assert pieces["parts"] == path["delta_parts"] == \
            pieces["cached"] + pieces["made"] + pieces["shared"]
        assert path["generated"] and path["generation_seconds"] > 0
        assert path["peak_memory_bytes"] > 1024 * 1024  # the compiler's resident set at least
        assert path["offline_bytes"] > path["delta_bytes"] * 0.9
    text = (report_dir(composed_pair.build_dir, composed_pair.ref) / "report.txt").read_text()
    assert "peak memory" in text and "builder: " in text and " parts from the cache, " in text


@integration
def test_index_lists_every_offline_file_with_its_size_and_sha256(
        composed_pair: ComposedPair) -> None:
    import hashlib

    directory = report_dir(composed_pair.build_dir, composed_pair.ref)
    index = json.loads((directory / "index.json").read_text())
    assert index["ref"] == composed_pair.ref and index["to_commit"] == composed_pair.commit2
    assert sorted(e["file"] for e in index["files"]) == sorted(
        p.name for p in directory.glob("*.delta"))
    for entry in index["files"]:
        data = (directory / entry["file"]).read_bytes()
        assert entry["bytes"] == len(data)
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        assert entry["to_version"] == "4.14.3-1"
    update = next(e for e in index["files"] if e["from_commit"])
    assert (update["from_commit"], update["from_version"]) == (composed_pair.commit1,
                                                               "4.14.2-1")


@integration
def test_scratch_offline_file_applies_on_an_empty_repo(composed_pair: ComposedPair,
                                                       tmp_path: Path) -> None:
    pair = composed_pair
    delta_file = report_dir(pair.build_dir, pair.ref) / f"empty-{pair.commit2}.delta"
    device = tmp_path / "device"
    ostree(f"--repo={device}", "init", "--mode=bare")
    assert cli("apply-delta", "--repo", device, delta_file) == 0
    ostree(f"--repo={device}", "fsck")


@pytest.mark.parametrize(("option", "value", "problem"), [
    ("--jobs", "0", "--jobs: must be 1 or more"),
    ("--memory-limit", "lots", "--memory-limit: 'lots' is not a size"),
])
def test_bad_parallelism_options_are_input_errors(tmp_path: Path, option: str, value: str,
                                                  problem: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ostree" / "repo").mkdir(parents=True)
    (tmp_path / "ostree" / "repo" / "config").write_text("[core]\nmode=archive\n")
    assert cli("deltas", "--build-dir", tmp_path, option, value) == 2
    assert problem in capsys.readouterr().err
