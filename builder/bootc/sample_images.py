"""For the device simulation's image mode (tests/device/test_image_mode.py): two SAMPLE
commits as bootc container images in one OCI layout, the v1 -> v2 image delta, and what a
site publishes for image-mode devices' updaters:

    updates/IMAGE_REF/   the signed index, its statement and the delta file, as `publish`
                         writes them for a release's pushed images
                         (builder/publish/image_updates.py)

The images are made as the bootc stage makes them (builder/bootc/image.py: the commit's
tree with bootc's layout, layers planned by group, the second image keeping the first one's
plan); the sample commits have no rpm database, so the groups are by directory.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.bootc.image import BootcOptions, content, image_tree
from builder.bootc.image_delta import write_image_delta
from builder.bootc.layers import LayerPlan, groups, plan_layers
from builder.bootc.oci import CONFIG, LAYER, MANIFEST, Blob, Layout, single_layout
from builder.bootc.tree import CommitTree
from builder.context import Context
from builder.core.signing import (
    SAMPLE_PUBLIC_KEY,
    SigningKey,
    ensure_sample_key,
    stop_agent,
)
from builder.publish.image_updates import (
    ImageRelease,
    delta_name,
    image_updates_ref,
    pack_layout,
    write_image_index,
)
from builder.publish.statement_signing import sign_timestamp
from builder.updater.freshness import DEFAULT_VALIDITY_SECONDS

IMAGE_REF = image_updates_ref("sample/device-sim/x86_64/edge")   # the sample commits' ostree ref's
SAMPLE_REFERENCE = "registry.sample/microshift/device-sim"   # what the policy scopes


@dataclass(frozen=True)
class SampleImages:
    layout: Path              # both images; oci:LAYOUT:v1 and :v2 name them
    v1: str                   # manifest digests
    v2: str
    updates: Path             # updates/IMAGE_REF/
    delta_file: Path
    changed_layer_bytes: int  # the gzip'ed layers v2 has and v1 lacks: a pull's cost
    delta_report: dict[str, Any]
    public_key: Path          # what the device's policy trusts (signedBy keyPath)

    def single(self, name: str) -> Path:
        """A layout holding only image `name` (v1 or v2), as `bootc switch` reads one."""
        return self.layout.parent / f"image-{name}"


def build_sample_images(ctx: Context, repo: Path, commits: tuple[str, str],
                        versions: tuple[str, str], out: Path, *, ref: str = IMAGE_REF,
                        reference: str = SAMPLE_REFERENCE) -> SampleImages:
    """v1 and v2 (`commits` of the archive `repo`, with their `versions`) as images, the
    delta between them and the signed index (the build directory's SAMPLE key) in
    OUT/updates/REF/, naming the images as pushed to `reference`."""
    layout = Layout(out / "layout")
    layout.init()
    plan: LayerPlan | None = None
    digests: list[str] = []
    for number, commit in enumerate(commits, start=1):
        manifest, plan = _image(ctx, layout, repo, commit, plan,
                                version=versions[number - 1], created=number)
        digests.append(manifest.digest)
        single_layout(layout, manifest.digest, out / f"image-v{number}")
    v1, v2 = digests
    had = {entry["digest"] for entry in layout.read_json(v1)["layers"]}
    changed = sum(entry["size"] for entry in layout.read_json(v2)["layers"]
                  if entry["digest"] not in had)
    report = write_image_delta(layout, v1, v2, out / "delta", ctx.runner)
    updates = out / "updates" / ref
    updates.mkdir(parents=True, exist_ok=True)
    delta_file = updates / delta_name(v1, v2)
    pack_layout(out / "delta", delta_file)
    key = ensure_sample_key(ctx.runner, ctx.progress, ctx.layout.sample_gpg_home,
                            ctx.release.source_date_epoch)
    try:
        release = ImageRelease(ref, reference, v2, versions[1], None, None)
        publish_index(ctx, key, updates, release, v1, delta_file=delta_file)
    finally:
        stop_agent(ctx.runner, key.homedir)
    return SampleImages(layout.root, v1, v2, updates, delta_file, changed, report,
                        key.homedir / SAMPLE_PUBLIC_KEY)


def single_image(ctx: Context, repo: Path, commit: str, version: str, out: Path) -> str:
    """`commit` as the one image of the OCI layout OUT/image (made as the sample images are,
    in OUT/layout); its manifest digest."""
    layout = Layout(out / "layout")
    layout.init()
    manifest, _ = _image(ctx, layout, repo, commit, None, version=version, created=1)
    single_layout(layout, manifest.digest, out / "image")
    return manifest.digest


def publish_index(ctx: Context, key: SigningKey, updates: Path, release: ImageRelease,
                  old: str, *, delta_file: Path | None) -> None:
    """The signed index and statement; without `delta_file` the index offers no delta (a
    device then pulls the layers it lacks from the registry)."""
    write_image_index(ctx, key, updates, release,
                      [(old, delta_file)] if delta_file is not None else [])
    sign_timestamp(ctx.runner, key, updates, release.ref, DEFAULT_VALIDITY_SECONDS)


def _image(ctx: Context, layout: Layout, repo: Path, commit: str, previous: LayerPlan | None,
           *, version: str, created: int) -> tuple[Blob, LayerPlan]:
    tree = CommitTree(repo, commit, ctx.runner)
    nodes = image_tree(tree.nodes(), tree, BootcOptions())
    plan = plan_layers(groups(nodes, {}), previous)
    by_group: dict[str, list[Any]] = {}
    for group in groups(nodes, {}):
        by_group[group.name] = [n for n in nodes if n.path in set(group.paths)]
    blobs = []
    for _, names in plan.layers():
        members = [node for name in names for node in by_group.get(name, [])]
        if members:
            blobs.append(layout.write_layer(members, lambda n: content(tree, n)))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ",
                          time.gmtime(ctx.release.source_date_epoch + created))
    labels = {"containers.bootc": "1", "ostree.bootable": "1",
              "org.opencontainers.image.version": version}
    config = layout.put_json({"architecture": "amd64", "os": "linux", "created": stamp,
                              "config": {"Labels": labels},
                              "rootfs": {"type": "layers",
                                         "diff_ids": [b.diff_id for b in blobs]}})
    manifest = layout.put_json({"schemaVersion": 2, "mediaType": MANIFEST,
                                "config": config.descriptor(CONFIG),
                                "layers": [b.descriptor(LAYER) for b in blobs]})
    return manifest, plan
