"""The build plan: what a run builds, made once from the release and the command line.

For each image and architecture an `ImageTarget` (its ref, from `substitute_ref`, and its
blueprint and lock in the build directory's `Layout`), the signing keys, and the build's
options as frozen fields. `build-image`, the VM tier's release pairs and every command that
builds one stage make a plan and hand it to the stages (builder/chain.py); no stage works out
a ref or a key again, and no command passes its argparse Namespace on.

    plan = make_plan(ctx, ["microshift-full"], keys=Keys.of(ctx, homedir, key_id))
    for target in plan.targets_on("x86_64"): ...
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from builder.blueprint.target import ImageTarget, image_target
from builder.context import Context
from builder.core.build_layout import Layout
from builder.core.errors import InputError
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.core.signing import SigningKey, release_signing_key, resolve_key
from builder.release.model import Release
from builder.updater.freshness import DEFAULT_VALIDITY_SECONDS

STAGES = ("rpms", "blueprint", "compose", "sbom", "bootc", "deltas", "installer")


@dataclass(frozen=True)
class Keys:
    """The run's signing keys, resolved the first time a stage needs one (a run that stops
    at its inputs leaves no SAMPLE key behind), then the same for every image and
    architecture."""

    runner: Runner
    progress: Progress
    sample_home: Path | None       # where the SAMPLE key lives, when the release may use it
    epoch: int
    homedir: Path | None = None    # the user's release key (--gpg-homedir, --gpg-key)
    key_id: str | None = None

    @classmethod
    def of(cls, ctx: Context, homedir: Path | None = None, key_id: str | None = None, *,
           sample_always: bool = False) -> Keys:
        """The keys of a run: --gpg-homedir and --gpg-key, else the SAMPLE key for a
        release on the SAMPLE base (or whenever `sample_always`: the VM tier's releases,
        composed onto the SAMPLE bootable base through ostree.base)."""
        sample = ctx.release.ostree.base.is_sample or sample_always
        if (homedir is None) != (key_id is None):
            raise InputError("command line", "--gpg-homedir/--gpg-key", "give both or neither")
        return cls(ctx.runner, ctx.progress, ctx.layout.sample_gpg_home if sample else None,
                   ctx.release.source_date_epoch, homedir, key_id)

    @cached_property
    def signing(self) -> SigningKey | None:
        """Signs commits, the summary and the update index: the release key, else the
        SAMPLE key (a release on the SAMPLE base), else none (said out loud)."""
        return self.release or release_signing_key(
            self.runner, self.progress, None, None, sample_home=self.sample_home,
            epoch=self.epoch)

    @cached_property
    def release(self) -> SigningKey | None:
        """The user's release key alone: it also signs RPMs and repomd.xml. The SAMPLE key
        signs only the detached commit signatures, so sample builds stay byte-identical."""
        if self.homedir is None or self.key_id is None:
            return None
        return resolve_key(self.runner, self.homedir.resolve(), self.key_id)


@dataclass(frozen=True)
class RegistryPush:
    """Where the bootc stage pushes each image: REGISTRY/NAMESPACE/NAME."""

    namespace: str
    tls_verify: bool = True
    signatures: Path | None = None   # default: DIR/bootc/signatures


@dataclass(frozen=True)
class BuildOptions:
    stages: tuple[str, ...] = STAGES
    validity: int = DEFAULT_VALIDITY_SECONDS   # how long the update index is current
    delta_generator: str = "builder"
    delta_cache_limit: int | None = None       # bytes of DIR/cache/delta-parts
    deltas_from: int | None = None             # None: release.yaml's ostree.deltas_from
    scratch_delta: bool = True                 # also the delta from scratch (new devices)
    push: RegistryPush | None = None           # the bootc images to a registry

    def __post_init__(self) -> None:
        unknown = [stage for stage in self.stages if stage not in STAGES]
        if unknown:
            raise ValueError(f"unknown stages {unknown}; the stages are {STAGES}")


@dataclass(frozen=True)
class BuildPlan:
    release: Release                  # the run's, every architecture of it
    layout: Layout
    images: tuple[str, ...]
    targets: tuple[ImageTarget, ...]  # every image on every architecture, refs resolved
    keys: Keys
    options: BuildOptions = field(default_factory=BuildOptions)

    def targets_on(self, arch: str) -> tuple[ImageTarget, ...]:
        return tuple(target for target in self.targets if target.arch == arch)

    def runs(self, stage: str) -> bool:
        return stage in self.options.stages


def check_ref(ref: str | None, release: Release) -> None:
    """An explicit --ref must name {arch} when the run builds several architectures: one
    ref cannot hold the commits of several."""
    if ref is not None and "{arch}" not in ref and len(release.architectures) > 1:
        raise InputError("command line", "--ref",
                         f"{ref!r} would hold the commits of "
                         f"{', '.join(release.architectures)}",
                         hint="put {arch} in the ref, or build one architecture with --arch")


def image_targets(ctx: Context, images: tuple[str, ...] | list[str],
                  ref: str | None = None) -> tuple[ImageTarget, ...]:
    """Every image on every architecture of the run (per architecture, images in order),
    each with its ref worked out once."""
    check_ref(ref, ctx.release)
    return tuple(image_target(ctx.for_arch(arch), image, ref)
                 for arch in ctx.release.architectures for image in images)


def make_plan(ctx: Context, images: tuple[str, ...] | list[str], *, keys: Keys,
              ref: str | None = None, options: BuildOptions | None = None) -> BuildPlan:
    return BuildPlan(ctx.release, ctx.layout, tuple(images), image_targets(ctx, images, ref),
                     keys, options or BuildOptions())
