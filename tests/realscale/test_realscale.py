"""The real-scale tier (issue 11): update paths with a 96 MB C++-linked Go executable and
520 MB of wheel-built image content, through the real chain (`nox -s realscale`).

Runs only with MSEB_REALSCALE=1 (the nox session sets it): it composes real releases and
takes from ~20 minutes (MSEB_REALSCALE_RELEASES=2, the adjacent pair alone, what CI runs)
to ~45 (4 releases: deltas from 3 previous commits) on 2 cores. Downloads and composes are
cached under build/bench (MSEB_REALSCALE_OUT); deltas are always generated afresh.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from bench import realscale
from bench.fixture import SERIES
from tests.support import requires

ROOT = Path(__file__).resolve().parents[2]
ENABLED = os.environ.get("MSEB_REALSCALE") == "1"
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not ENABLED, reason=f"{requires.TIER}: nox -s realscale"),
              requires.root_only("compose runs rpm --root and keeps ownership")]


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    series = os.environ.get("MSEB_REALSCALE_SERIES", "hugo-0.163")
    releases = int(os.environ.get("MSEB_REALSCALE_RELEASES", len(SERIES[series].payloads)))
    out = Path(os.environ.get("MSEB_REALSCALE_OUT", ROOT / "build" / "bench")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    measured = realscale.measure(series, releases, out)
    (out / f"realscale-{series}-{releases}.json").write_text(json.dumps(measured, indent=2))
    print(realscale.report(measured))
    return measured


def test_inputs_are_real_scale(result: dict[str, Any]) -> None:
    assert result["payload"]["bytes"] >= 90_000_000
    assert result["image_content_bytes"] >= 300_000_000


def test_update_delta_beats_xdelta3_and_zstd(result: dict[str, Any]) -> None:
    ratios = result["ratios"]
    assert ratios["delta_vs_xdelta3"] <= 0.7, result["update"]
    assert ratios["delta_vs_zstd19"] <= 0.5, result["update"]


def test_no_path_has_fallback_objects(result: dict[str, Any]) -> None:
    assert all(p["fallback_objects"] == 0 for p in result["paths"]), result["paths"]


def test_large_modified_files_travel_as_deltas(result: dict[str, Any]) -> None:
    large = [f for f in result["update"]["large_files"] if f["from_path"]]
    assert any(f["path"] == "/usr/bin/microshift" for f in large)
    assert all(f["encoding"] in ("bsdiff", "rollsum") for f in large), large


def test_every_offline_file_applies_and_fscks(result: dict[str, Any]) -> None:
    assert len(result["applied"]) == len(result["paths"])
    for applied in result["applied"]:
        assert applied["applied"] and applied["fsck_ok"], applied


def test_generation_stays_within_the_memory_ceiling(result: dict[str, Any]) -> None:
    for path in result["paths"]:
        assert 0 < path["peak_memory_bytes"] <= result["memory_ceiling_bytes"], path


def test_paths_run_in_parallel(result: dict[str, Any]) -> None:
    if sum(1 for p in result["paths"] if p["from_version"]) < 3:
        pytest.skip(f"{requires.TIER}: the wall-time target is for deltas from 3 previous commits "
                    "(MSEB_REALSCALE_RELEASES=4)")
    # Paths ran at the same time when their spans add up to more than the stage's wall time
    # (one after another they add up to less): true under any load. How close the wall
    # time comes to the slowest path (target <= 1.3x) is the benchmark's figure
    # (result["checks"], docs/benchmarks.md), not a test's.
    spans = sum(p["path_seconds"] for p in result["paths"])
    assert spans > result["stage_wall_seconds"], result["paths"]


def test_the_devices_updater_moves_only_the_delta_file(result: dict[str, Any]) -> None:
    """Issue 12 at real size: the shipped microshift-update on a device holding the
    from-commit downloads the signed delta file and little else, also when cut 5 times."""
    plain, cut = result["ota"]["no cuts"], result["ota"]["5 cuts"]
    assert plain["ratio"] <= 1.02 and cut["ratio"] <= 1.05, result["ota"]
    assert cut["cuts"] == 5 and cut["duplicate_bytes"] == 0, cut
    assert plain["pull_ratio"] > plain["ratio"], result["ota"]  # what the updater saves


def test_the_devices_updater_holds_the_link_rate_at_real_size(result: dict[str, Any]) -> None:
    """Over a throttled link (tc tbf between network namespaces) the real-scale delta file
    takes at least bytes / rate (the throttle works; load only makes it slower). How close
    it comes (target <= 1.1x) is the benchmark's figure (result["checks"],
    docs/benchmarks.md): no test asserts a timing ratio."""
    rows = {label: result["ota"][label] for label in ("5 Mbit/s, 5 cuts", "1 Mbit/s")
            if label in result["ota"]}
    if not rows:
        pytest.skip(f"{requires.NO_NETNS}: the throttled link runs between namespaces")
    for label, row in rows.items():
        assert row["ratio"] <= 1.05 and row["duplicate_bytes"] == 0, (label, row)
        assert row["time_ratio"] >= 0.95, (label, row)
    assert rows["5 Mbit/s, 5 cuts"]["cuts"] == 5


def test_image_mode_sends_the_changed_os_content_within_1_3x(result: dict[str, Any]) -> None:
    """Issue 40: a device on the previous bootc image pulls, for the OS content, at most
    1.3x gzip of the files that changed; the whole single-layer image would be far more."""
    mode = result["image_mode"]
    assert "rpm:microshift-core" in mode["os_changed_layers"], mode
    assert mode["os_pull_vs_changed_gzip"] <= 1.3, mode
    assert mode["pull_bytes"] < mode["single_layer_bytes"], mode


def test_image_mode_as_a_tar_diff_delta_costs_at_most_1_2x_the_static_delta(
        result: dict[str, Any]) -> None:
    """Issue 41's bound, builder side: the image-mode update as tar-diffs against the
    previous image's files (builder/bootc/image_delta.py) is at most 1.2x ostree's static
    delta of the same change, where the changed layers are ~70x it."""
    mode = result["image_mode"]
    assert mode["tar_diff_bytes"] is not None, mode
    assert mode["tar_diff_vs_static_delta"] <= 1.2, mode
    assert mode["tar_diff_bytes"] * 10 < mode["pull_bytes"], mode


def test_an_image_mode_device_fetches_the_update_within_1_2x_with_3_cuts(
        result: dict[str, Any]) -> None:
    """Issue 41's bound, device side: the shipped updater on an image-mode device running
    the previous image downloads the delta file over a link cut 3 times (each cut resumed,
    no byte twice), rebuilds the layers to the signed digests and bootc stages the image;
    what crossed the link is at most 1.2x ostree's static delta of the same change and far
    below the changed layers."""
    device, mode = result["image_mode"]["device"], result["image_mode"]
    assert device["method"] == "image-delta" and device["staged"], device
    assert device["cuts"] == 3 == device["resumed"] and device["duplicate_bytes"] == 0, device
    assert device["bytes_on_wire"] <= 1.2 * result["update"]["delta_bytes"], device
    assert device["bytes_on_wire"] * 10 < mode["pull_bytes"], device
