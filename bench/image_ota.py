"""Image mode on the device at real size (issue 41): the real-scale pair's bootc images, and
the shipped updater on a simulated image-mode device running the previous image, fetching
the tar-diff delta file over a link cut 3 times, rebuilding the changed layers from its own
files and staging the result with bootc.

The device is installed from the previous release's ostree commit, switched to its bootc
image with the SAMPLE bootc stand-in (builder/device/standins/bootc) and booted; the site
holds what `publish` writes for image-mode devices (updates/REF/image/: the delta file, the
signed index naming the image's manifest, the signed statement). Bytes on the wire are the
site server's count of response bodies; the ostree static delta of the same change is the
deltas stage's.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from builder.bootc.image_delta import write_image_delta
from builder.bootc.oci import Layout, single_layout
from builder.context import Context
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.core.signing import ensure_sample_key, stop_agent
from builder.device import image_mode
from builder.device.boot import boot
from builder.device.commits import UpdatePair
from builder.device.health_server import ApiServer
from builder.device.sysroot import Device, release_deployments
from builder.device.updater_run import UpdateOptions, run_updater
from builder.publish.image_updates import (
    ImageRelease,
    delta_name,
    image_updates_ref,
    pack_layout,
    write_image_index,
)
from builder.publish.statement_signing import sign_timestamp
from builder.updater.freshness import DEFAULT_VALIDITY_SECONDS

REFERENCE = "registry.sample/microshift/realscale"   # what the device's policy scopes
CUTS = 3
SIM = {"retry_delay_seconds": 0, "timeout_seconds": 60, "mode": "image"}


def measure(build: Path, release: Path, pair: UpdatePair, scratch: Path) -> dict[str, Any]:
    """The image-mode update of `pair` (its commits' bootc images in `build`) on a device."""
    [report_file] = (build / "bootc").glob("*.x86_64.json")
    report = json.loads(report_file.read_text())
    layout = Layout(build / "bootc" / report["image"])
    old, new = report["update"]["from_manifest"], report["manifest"]
    # The bootc stage's delta when it made one for this update (what publish ships), else
    # made here the same way.
    delta = build / "bootc" / f"{report['image']}.x86_64.delta"
    started = time.monotonic()
    if not (delta.is_dir() and (report["update"].get("delta") or {}).get("to_manifest") == new):
        delta = scratch / "image-delta"
        write_image_delta(layout, old, new, delta, Runner(), threads=2)
    delta_seconds = time.monotonic() - started
    ctx = Context(build_dir=build, release_path=release,
                  progress=Progress(stream=open("/dev/null", "w")))  # noqa: SIM115
    ref = image_updates_ref(report["ref"])
    site = _site(ctx, scratch / "site", ref, (old, new), delta)
    device = _image_device(pair, single_layout(layout, old, scratch / "image-v1"),
                           scratch / "device")
    assert pair.public_key is not None, "the real-scale pair is signed"
    image_mode.trust(device, pair.public_key, REFERENCE)
    result, _ = run_updater(device, site, UpdateOptions(
        interruptions=CUTS, seed=CUTS, config={**SIM, "image_ref": ref}))
    staged = image_mode.bootc_status(device)["status"]["staged"]
    release_deployments(scratch / "device", Runner())
    shutil.rmtree(scratch / "device", ignore_errors=True)
    delta_file = result.delta_bytes or 0
    return {"method": result.method, "delta_file_bytes": delta_file,
            "bytes_on_wire": result.bytes_on_wire, "metadata_bytes": result.metadata_bytes,
            "cuts": result.interruptions, "resumed": result.resumed,
            "duplicate_bytes": result.duplicate_delta_bytes,
            "staged": bool(staged), "update_seconds": result.seconds,
            "delta_seconds": round(delta_seconds, 1)}


def _site(ctx: Context, site: Path, ref: str, images: tuple[str, str], delta: Path) -> Path:
    """site/repo (empty: an image-mode device reads none) and site/updates/REF/."""
    old, new = images
    updates = site / "updates" / ref
    updates.mkdir(parents=True)
    (site / "repo").mkdir()
    Runner().run(["ostree", f"--repo={site / 'repo'}", "init", "--mode=archive"])
    delta_file = updates / delta_name(old, new)
    pack_layout(delta, delta_file)
    key = ensure_sample_key(ctx.runner, ctx.progress, ctx.layout.sample_gpg_home,
                            ctx.release.source_date_epoch)
    try:
        write_image_index(ctx, key, updates, ImageRelease(ref, REFERENCE, new, "", None, None),
                          [(old, delta_file)])
        sign_timestamp(ctx.runner, key, updates, ref, DEFAULT_VALIDITY_SECONDS)
    finally:
        stop_agent(ctx.runner, key.homedir)
    return site / "repo"


def _image_device(pair: UpdatePair, image: Path, work: Path) -> Device:
    """Installed from the previous commit, switched to its image, booted."""
    device = Device(work, Runner(), Progress(stream=open("/dev/null", "w")))  # noqa: SIM115
    device.init("edge")
    deployment = device.install(pair.repo, pair.ref, commit=pair.v1, gpg_key=pair.public_key)
    device.write_greenboot_conf(deployment, {"MICROSHIFT_WAIT_TIMEOUT_SEC": "1"})
    with ApiServer() as api:
        boot(device, api, {})
        image_mode.switch(device, image)
        boot(device, api, {})
    return device
