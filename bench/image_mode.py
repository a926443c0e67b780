"""The same update in image mode (issue 40): what a device on the previous bootc image pulls.

The `bootc` stage records, for each build, the layers whose digest the previous build's image
lacks (DIR/bootc/NAME.ARCH.json, `update`). Here they are split in two:
- the layers of the OS content (packages, rpmdb, the rest), set against gzip level 6 of the
  files whose content changed outside the image store: the bound a device cannot beat with
  gzip'ed layers, so the ratio says what the layering costs on top of it (target <= 1.3);
- the layers of the image store: an image layer rebuilt at a new digest lands under a new
  overlay/<layer>/ directory, so image mode sends it whole, where ostree's delta finds the
  same file content at the new path.
"""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path
from typing import Any

from builder.core.ostree import Repo, TreeFile

STORE = "/usr/share/containers/storage/"
TARGET = 1.3
DELTA_TARGET = 1.2   # the image-mode delta against ostree's static delta of the same change


def measure(build: Path, repo: Repo, old: str, new: str, scratch: Path) -> dict[str, Any]:
    [report_file] = (build / "bootc").glob("*.x86_64.json")
    report = json.loads(report_file.read_text())
    update = report["update"]
    if report["commit"] != new or update["from_commit"] != old:
        raise SystemExit(f"{report_file}: built from {update['from_commit']} to "
                         f"{report['commit']}, not the measured {old} to {new}")
    changed = set(update["changed"])
    layers = [layer for layer in report["layers"] if layer["index"] in changed]
    store = [layer for layer in layers if any(g.startswith("store:") for g in layer["groups"])]
    os_layers = [layer for layer in layers if layer not in store]
    os_pull = sum(layer["size"] for layer in os_layers)
    bound = _changed_gzip(repo, old, new, scratch)
    return {"layers": len(report["layers"]), "changed_layers": len(layers),
            "pull_bytes": update["pull_bytes"], "os_pull_bytes": os_pull,
            "os_changed_layers": [g for layer in os_layers for g in layer["groups"]],
            "store_pull_bytes": sum(layer["size"] for layer in store),
            "store_changed_layers": len(store),
            "os_changed_gzip_bytes": bound,
            "os_pull_vs_changed_gzip": round(os_pull / bound, 3) if bound else None,
            "single_layer_bytes": update["single_layer_bytes"],
            # The same update as tar-diffs against the files of the previous image
            # (builder/bootc/image_delta.py), what a delta-capable device downloads.
            "tar_diff_bytes": update["delta"]["bytes"] if update.get("delta") else None,
            "tar_diff_seconds": update["delta"]["seconds"] if update.get("delta") else None,
            "compressed_bytes": report["compressed_bytes"]}


def _changed_gzip(repo: Repo, old: str, new: str, scratch: Path) -> int:
    """gzip level 6 of every file outside the image store whose content is new at its path."""
    before = {f.path: f.checksum for f in repo.files(old)}
    total = 0
    for file in repo.files(new):
        if file.path.startswith(STORE) or before.get(file.path) == file.checksum:
            continue
        total += _gzip_size(repo, new, file, scratch / "changed")
    return total


def _gzip_size(repo: Repo, commit: str, file: TreeFile, dest: Path) -> int:
    """At the level the bootc stage writes layers with (builder/bootc/oci.py)."""
    with dest.open("wb") as out:
        subprocess.run(["ostree", f"--repo={repo.path}", "cat", commit, file.path], stdout=out,
                       check=True)
    return len(gzip.compress(dest.read_bytes(), compresslevel=6, mtime=0))


def row(mode: dict[str, Any]) -> list[str]:
    mib = 1024 * 1024
    return [f"image mode (bootc): {mode['changed_layers']} of {mode['layers']} layers, "
            f"{mode['pull_bytes'] / mib:.2f} MiB: OS layers {mode['os_pull_bytes'] / mib:.2f} "
            f"MiB ({', '.join(mode['os_changed_layers'])}) against gzip -6 of the changed OS "
            f"files {mode['os_changed_gzip_bytes'] / mib:.2f} MiB = "
            f"{mode['os_pull_vs_changed_gzip']} (target <= {TARGET}); image-store layers "
            f"{mode['store_pull_bytes'] / mib:.2f} MiB ({mode['store_changed_layers']} "
            f"rebuilt); single-layer image {mode['single_layer_bytes'] / mib:.2f} MiB",
            f"image mode as a tar-diff delta (oci-delta layout): {mode['tar_diff_bytes']} bytes "
            f"= {mode.get('tar_diff_vs_static_delta')} of the ostree static delta (target <= "
            f"{DELTA_TARGET}), made in {mode['tar_diff_seconds']} s", *device_row(mode)]


def device_row(mode: dict[str, Any]) -> list[str]:
    device = mode.get("device")
    if not device:
        return []
    return [f"an image-mode device (SAMPLE bootc, microshift-update): {device['bytes_on_wire']} "
            f"bytes on the wire ({device['delta_file_bytes']} delta file, "
            f"{device['metadata_bytes']} signed metadata), {device['cuts']} cuts resumed, "
            f"{device['duplicate_bytes']} bytes sent twice, staged: {device['staged']}, "
            f"{device['update_seconds']:.0f} s for the run (download, rebuild, bootc switch)"]
