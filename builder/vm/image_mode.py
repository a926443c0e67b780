"""The VM scenarios in image mode (`device simulate --vm --mode image`): a bootc device.

The two releases are composed as in ostree mode (builder/vm/releases.py); each commit then
becomes its bootc container image as the bootc stage cuts one (builder/bootc/sample_images.py:
the commit's tree with bootc's layout, v2's layers planned from v1's), with the tar-diff
delta v1 -> v2 and the signed index image-mode updaters read, published beside the ostree
updates in updates/REF/image/. The disk is installed from image v1 (builder/disk/deployment.py
`ImageSource`: the device's own bootc imports it), with the containers policy that accepts
only the release's signed images and an update.yaml in `mode: image`. From there the device
updates itself as a bootc device does: `microshift-update` fetches the delta, rebuilds the
layers, `bootc switch`es to them; greenboot's fallback check calls `bootc rollback`.

A boot is then known by its image's manifest digest (the SAMPLE boot report prints it), and
the scenario's expectations are held to the digests where ostree mode holds them to commits.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from builder.baseos.debian import BOOTC_STANDIN
from builder.bootc.registry import POLICY_KEY, device_policy
from builder.bootc.sample_images import SampleImages, build_sample_images
from builder.context import Context
from builder.disk.deployment import ImageSource
from builder.publish.image_updates import image_updates_ref
from builder.updater.image_run import DIGESTS
from builder.updater.status import STATE_DIR
from builder.vm.boots import BootRecord
from builder.vm.disk_state import DiskState
from builder.vm.releases import IMAGE, BuiltPair

MODES = ("ostree", "image")
NAMESPACE = "registry.sample/microshift"   # where the release's images are pushed to


@dataclass(frozen=True)
class ImagePair:
    """The two releases as images: `pair` with manifest digests for commits."""

    commits: BuiltPair       # the ostree releases the images were made from
    images: SampleImages
    reference: str
    updates_ref: str         # update.yaml image_ref: the ostree ref's REF/image

    @property
    def as_images(self) -> BuiltPair:
        """The pair as the expectations read it: v1 and v2 are the images' digests."""
        return replace(self.commits, v1=self.images.v1, v2=self.images.v2)

    def source(self) -> ImageSource:
        return ImageSource(self.images.single("v1"), f"{self.reference}:{self.commits.v1_version}",
                           self.images.v1, BOOTC_STANDIN)


def build_images(ctx: Context, pair: BuiltPair, work: Path) -> ImagePair:
    """Both releases' images, the delta and the signed index, published into the pair's
    updates (served as /updates/)."""
    updates_ref = image_updates_ref(pair.ref)
    reference = f"{NAMESPACE}/{IMAGE}"
    out = work / "images"
    shutil.rmtree(out, ignore_errors=True)
    images = build_sample_images(ctx, pair.build_dir / "ostree/repo", (pair.v1, pair.v2),
                                 (pair.v1_version, pair.v2_version), out,
                                 ref=updates_ref, reference=reference)
    published = pair.build_dir / "deltas" / updates_ref
    shutil.rmtree(published, ignore_errors=True)
    shutil.copytree(images.updates, published)
    ctx.progress.info(f"images v1 {images.v1[:19]}, v2 {images.v2[:19]}; delta "
                      f"{images.delta_file.stat().st_size} bytes (changed layers "
                      f"{images.changed_layer_bytes} bytes)")
    return ImagePair(pair, replace(images, updates=published,
                                   delta_file=published / images.delta_file.name),
                     reference, updates_ref)


def image_settings(images: ImagePair, update: Mapping[str, object],
                   server: str) -> dict[str, bytes]:
    """What an image-mode device carries in /etc besides the ostree device's settings: the
    updater in image mode, and the containers policy with the release key."""
    config = {**update, "mode": "image", "image_ref": images.updates_ref,
              "updates_url": f"http://{server}/updates/"}
    policy = device_policy(images.reference)
    return {
        "microshift/update.yaml": "".join(
            f"{k}: {json.dumps(v)}\n" for k, v in config.items()).encode(),
        "containers/policy.json": (json.dumps(policy, indent=2, sort_keys=True)
                                   + "\n").encode(),
        POLICY_KEY.removeprefix("/etc/"): images.images.public_key.read_bytes(),
    }


def signed_digests(state: DiskState, boots: list[BootRecord]) -> None:
    """Name each boot's image by its signed manifest. An image the updater staged is the
    layout it wrote from the delta (its layers uncompressed: another manifest digest, which
    the boot report prints); the updater keeps which signed manifest each one was made from
    (/var/lib/microshift-update/image-digests.json), as `bootc status` callers read it."""
    text = state.var_file(str((STATE_DIR / DIGESTS).relative_to("var"))) or "{}"
    try:
        known = json.loads(text)
    except ValueError:
        known = {}
    for boot in boots:
        if boot.image is not None and isinstance(known, dict):
            boot.image = str(known.get(boot.image, boot.image))
