"""An image's target on one architecture: its name, the ostree ref its commits go on, and
the blueprint and lock it is composed from.

The ref is worked out here and nowhere else (`target_ref`): when the blueprint is rendered it
is written into the lock (`ref`), and every later stage (compose, deltas, SBOM, installer,
disk, the composer client) reads the target back with `image_target` instead of deriving the
ref again. Before an image is rendered (a `deltas` run on a pulled repository, a disk image
of a published commit) the same function gives the ref from the profile.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from builder.blueprint.render import load_profile
from builder.context import Context
from builder.core.build_layout import Layout
from builder.core.errors import InputError
from builder.release.model import Release
from builder.release.ostree_config import substitute_ref


@dataclass(frozen=True)
class ImageTarget:
    image: str
    arch: str
    ref: str
    blueprint: Path   # DIR/blueprints/NAME.toml
    lock: Path        # DIR/blueprints/NAME.ARCH.lock.json
    explicit_ref: bool = False   # the ref came from the command line (--ref)


def target_ref(release: Release, arch: str, image: str, profile_ref: str | None) -> str:
    """release.yaml ostree.ref, else the profile's, else the default ({arch}, {image}
    filled in). Applying it to a ref it made gives that ref again."""
    return release.ostree.ref_for(arch, image, profile_ref)


def target_paths(build_dir: Path, image: str, arch: str) -> tuple[Path, Path]:
    layout = Layout(build_dir)
    return layout.blueprint(image), layout.lock(image, arch)


def image_target(ctx: Context, image: str, ref: str | None = None) -> ImageTarget:
    """The target of `image` on the context's architecture: with an explicit `ref` (a
    command's --ref, `{arch}` and `{image}` filled in), that ref; else as rendered into its
    lock, else from its profile (an image neither rendered here nor in profiles.yaml is an
    input error naming it)."""
    arch = ctx.target_arch
    blueprint, lock = target_paths(ctx.build_dir, image, arch)
    if ref is not None:
        return ImageTarget(image, arch, substitute_ref(ref, arch=arch, image=image),
                           blueprint, lock, explicit_ref=True)
    recorded = _locked_ref(lock)
    if recorded is not None:  # made by target_ref when the blueprint was rendered
        return ImageTarget(image, arch, recorded, blueprint, lock)
    profile_ref = None
    try:
        profile_ref = load_profile(image).ref(arch)
    except InputError:
        if not lock.is_file():
            raise  # neither rendered here nor a known profile: name the unknown image
    return ImageTarget(image, arch, target_ref(ctx.release, arch, image, profile_ref),
                       blueprint, lock)


def _locked_ref(lock: Path) -> str | None:
    try:
        ref = json.loads(lock.read_text()).get("ref")
    except (OSError, ValueError, AttributeError):
        return None
    return ref if isinstance(ref, str) and ref else None

