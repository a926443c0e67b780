"""What image-mode (bootc) devices' updaters read, published beside the ostree updates:

    updates/REF/image/index.json{,.sig}       the signed index: to_commit is the image's
                                              manifest digest (hex), `image` its delta files
                                              (builder/updater/image_index.py reads it)
    updates/REF/image/timestamp.json{,.sig}   the statement that it is current (signed with
                                              every other index's, rollouts included)
    updates/REF/image/FROM-TO.oci-delta.tar   the bootc stage's delta (DIR/bootc/NAME.ARCH.
                                              delta/) as one file: downloaded with HTTP
                                              ranges and resumed after cuts

REF is the ostree ref the image was made from; a device sets `image_ref: REF/image` in its
update.yaml. The index names the registry reference the image was pushed to (`build-image
--push`, recorded in the bootc report): the device's containers policy scopes that
reference, and only its signedBy keys may vouch for the index. An image never pushed, or a
publish without a key, gets no index: a device refuses an unsigned one anyway.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.context import Context
from builder.core.build_layout import Layout
from builder.core.files import write_atomic
from builder.core.signing import SigningKey, sign_detached
from builder.publish.offline import INDEX, INDEX_FORMAT

DELTA_SUFFIX = ".oci-delta.tar"
IMAGE_DIR = "image"
VERSION_LABEL = "org.opencontainers.image.version"


@dataclass(frozen=True)
class ImageRelease:
    """One bootc image of a build, as its report (DIR/bootc/NAME.ARCH.json) describes it."""

    ref: str                  # the image's updates ref: the ostree ref's REF/image
    reference: str            # REGISTRY/NAMESPACE/NAME it was pushed to
    manifest: str             # sha256:...
    version: str
    delta: Path | None        # DIR/bootc/NAME.ARCH.delta/, when it updates from_manifest
    from_manifest: str | None


def image_updates_ref(ref: str) -> str:
    return f"{ref}/{IMAGE_DIR}"


def delta_name(old: str, new: str) -> str:
    return f"{old[len('sha256:'):]}-{new[len('sha256:'):]}{DELTA_SUFFIX}"


def pack_layout(layout: Path, dest: Path) -> None:
    """The delta layout as one uncompressed tar (its blobs are compressed already), members
    sorted and dated 0: the same delta gives the same file. It ends with the end-of-archive
    blocks, without tarfile's padding to a 10 KiB record: on a small delta that padding was
    up to a third of what crossed the device's link, and readers need only the two blocks."""
    tmp = dest.with_name(f".{dest.name}.tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(p for p in layout.rglob("*") if p.is_file()):
            info = tar.gettarinfo(str(path), path.relative_to(layout).as_posix())
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with path.open("rb") as handle:
                tar.addfile(info, handle)
        end = tar.offset + 2 * tarfile.BLOCKSIZE
    os.truncate(tmp, end)
    tmp.replace(dest)


def write_image_index(ctx: Context, key: SigningKey, ref_dir: Path, release: ImageRelease,
                      deltas: Iterable[tuple[str, Path]]) -> None:
    """REF_DIR/index.json and its signature: the release's image, with each (from_manifest,
    delta file) of `deltas`. The statement is the caller's to sign."""
    entries = []
    for source, path in deltas:
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for piece in iter(lambda: handle.read(1 << 20), b""):
                digest.update(piece)
        entries.append({"file": path.name, "from_manifest": source,
                        "bytes": path.stat().st_size, "sha256": digest.hexdigest()})
    manifest = release.manifest
    index = {"format": INDEX_FORMAT, "ref": release.ref, "to_commit": manifest[len("sha256:"):],
             "to_version": release.version, "files": [],
             "image": {"reference": release.reference, "manifest": manifest,
                       "deltas": entries}}
    write_atomic(ref_dir / INDEX, json.dumps(index, indent=2, sort_keys=True) + "\n")
    sign_detached(ctx.runner, key, ref_dir / INDEX, ctx.release.source_date_epoch)


def image_releases(build: Path) -> list[ImageRelease]:
    """The pushed bootc images of a build directory, from their reports."""
    layout = Layout(build)
    found = []
    for path in sorted((build / "bootc").glob("*.json")):
        report = _report(path)
        if report is None:
            continue
        pushed = report.get("pushed") or {}
        if not isinstance(pushed, dict) or not isinstance(pushed.get("reference"), str):
            continue
        update = report.get("update") or {}
        delta = layout.bootc_delta(report["image"], report["arch"])
        offered = isinstance(update.get("delta"), dict) and delta.is_dir() and \
            update["delta"].get("to_manifest") == report["manifest"]
        found.append(ImageRelease(
            image_updates_ref(report["ref"]), pushed["reference"], report["manifest"],
            _version(layout.bootc_layout(report["image"]), report["manifest"]),
            delta if offered else None, update.get("from_manifest") if offered else None))
    return found


def unpushed(build: Path) -> list[str]:
    """NAME.ARCH of the build's bootc images that were never pushed (no index for them)."""
    names = []
    for path in sorted((build / "bootc").glob("*.json")):
        report = _report(path)
        if report is not None and not isinstance(report.get("pushed"), dict):
            names.append(f"{report['image']}.{report['arch']}")
    return names


def stage_images(ctx: Context, builds: Iterable[Path], dest: Path,
                 key: SigningKey | None) -> int:
    """updates/REF/image/ under `dest` for every pushed image of `builds`; how many."""
    count = 0
    for build in builds:
        for name in unpushed(build):
            ctx.progress.info(f"bootc image {name} was not pushed (build-image --push): no "
                              "index for image-mode devices")
        for release in image_releases(build):
            if key is None:
                ctx.progress.warn(f"updates/{release.ref}: not written: image-mode devices "
                                  "take only a signed index; publish with --gpg-key")
                continue
            ref_dir = dest / release.ref
            ref_dir.mkdir(parents=True, exist_ok=True)
            deltas = []
            if release.delta is not None and release.from_manifest:
                file = ref_dir / delta_name(release.from_manifest, release.manifest)
                pack_layout(release.delta, file)
                deltas.append((release.from_manifest, file))
            write_image_index(ctx, key, ref_dir, release, deltas)
            ctx.progress.info(f"updates/{release.ref}: {release.manifest[:19]} of "
                              f"{release.reference}, {len(deltas)} delta files")
            count += 1
    return count


def _report(path: Path) -> dict[str, Any] | None:
    """A bootc image report (not a layer plan, not another JSON file), or None."""
    if path.name.endswith(".plan.json"):
        return None
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    keys = ("image", "arch", "ref", "manifest")
    if not isinstance(report, dict) or not all(isinstance(report.get(k), str) for k in keys):
        return None
    return report


def _version(layout: Path, manifest: str) -> str:
    """The image's version label, from its config in the bootc stage's layout ("" when the
    layout no longer holds it)."""
    try:
        document = json.loads((layout / "blobs/sha256" / manifest[7:]).read_text())
        config = json.loads((layout / "blobs/sha256" /
                             document["config"]["digest"][7:]).read_text())
        labels = config.get("config", {}).get("Labels") or {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return ""
    version = labels.get(VERSION_LABEL) if isinstance(labels, dict) else None
    return version if isinstance(version, str) else ""
