"""The chain of stages, written once: what `build-image` runs and what the VM tier's release
pairs run, from a build plan (builder/plan.py).

    rpms -> blueprint -> compose -> sbom -> bootc -> deltas -> installer

Each stage takes the run's context and the plan and returns the artifacts it made (label,
path) for the run's report. compose, sbom, bootc and installer run once per architecture, each
architecture after the other; the deltas of every image and architecture are one job
(builder/publish/deltas.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from builder.context import Context
from builder.plan import STAGES, BuildPlan

if TYPE_CHECKING:  # stage modules are imported when their stage runs
    from builder.bootc.image import BootcImage

Artifact = tuple[str, Path]


def run_chain(ctx: Context, plan: BuildPlan) -> list[Artifact]:
    """Every stage of the plan, in the chain's order."""
    made: list[Artifact] = []
    for stage in STAGES:
        if plan.runs(stage):
            made += STAGE_RUNNERS[stage](ctx, plan)
    return made


def _arch_contexts(ctx: Context, plan: BuildPlan) -> list[Context]:
    return [ctx.for_arch(arch) for arch in plan.release.architectures]


def _rpms(ctx: Context, plan: BuildPlan) -> list[Artifact]:
    from builder.rpm.packages import build_release_rpms
    from builder.rpm.payloads import check_payloads
    from builder.rpm.sample_base import build_sample_base

    check_payloads(ctx)
    layout = plan.layout
    made: list[Artifact] = []
    if any(repo.kind == "sample" for repo in plan.release.base_repos):
        build_sample_base(ctx)
        made.append(("sample base repository (SAMPLE)", layout.sample_base_repos))
    # A release key given by the user signs RPMs and repomd.xml; the SAMPLE key does not,
    # so sample builds stay byte-identical.
    build_release_rpms(ctx, key=plan.keys.release)
    return [*made, ("RPMs", layout.rpms),
            *((f"yum repository, {arch}", layout.yum_repo(arch))
              for arch in plan.release.architectures)]


def _blueprint(ctx: Context, plan: BuildPlan) -> list[Artifact]:
    from builder.blueprint.build import build_blueprint

    for image in plan.images:
        build_blueprint(ctx, image)
    return [("blueprints + lock files", plan.layout.blueprints)]


def _compose(ctx: Context, plan: BuildPlan) -> list[Artifact]:
    from builder.compose.commit import ComposeOptions, compose_image

    made: list[Artifact] = []
    for arch_ctx in _arch_contexts(ctx, plan):
        for target in plan.targets_on(arch_ctx.target_arch):
            result = compose_image(arch_ctx, target, ComposeOptions(key=plan.keys.signing))
            ctx.progress.info(f"commit {result.commit} on {result.ref}")
        made.append((f"ostree repository, {arch_ctx.target_arch}", plan.layout.ostree_repo))
    return made


def _sbom(ctx: Context, plan: BuildPlan) -> list[Artifact]:
    from builder.publish.sbom import write_sbom

    return [(f"SBOM (SPDX 2.3), {target.image}, {target.arch}", write_sbom(arch_ctx, target))
            for arch_ctx in _arch_contexts(ctx, plan)
            for target in plan.targets_on(arch_ctx.target_arch)]


def _bootc(ctx: Context, plan: BuildPlan) -> list[Artifact]:
    """Each image of each architecture as a bootc container image (its OCI layout), pushed
    when the plan names a registry."""
    from builder.bootc.image import build_bootc_image

    made: list[Artifact] = []
    for arch_ctx in _arch_contexts(ctx, plan):
        for target in plan.targets_on(arch_ctx.target_arch):
            image = build_bootc_image(arch_ctx, target)
            made.append((f"bootc image {image.manifest.digest[:19]}, {target.image}, "
                         f"{target.arch}", image.layout))
            delta = image.report["update"].get("delta")
            if delta:
                made.append((f"bootc delta from {delta['from_manifest'][:19]}, "
                             f"{target.image}, {target.arch}",
                             arch_ctx.layout.bootc_delta(target.image, target.arch)))
            if plan.options.push is not None:
                pushed = push_bootc_image(arch_ctx, plan, image)
                made.append((f"pushed {pushed}", image.layout))
    return made


def push_bootc_image(ctx: Context, plan: BuildPlan, image: BootcImage) -> str:
    """The image in the plan's registry, signed with the plan's key: REGISTRY/NS/NAME@DIGEST."""
    from builder.bootc.publish import PushOptions, push_image

    push = plan.options.push
    if push is None:
        raise ValueError("the plan names no registry to push to")
    pushed = push_image(ctx, image, PushOptions(
        namespace=push.namespace, key=plan.keys.signing,
        signatures=push.signatures or plan.layout.bootc_signatures,
        tls_verify=push.tls_verify))
    return pushed.by_digest


def _deltas(ctx: Context, plan: BuildPlan) -> list[Artifact]:
    """Every image of every architecture: the matrix's paths in one job."""
    from builder.publish.deltas import DeltaOptions, DeltaTarget, generate_matrix

    targets = [DeltaTarget(arch_ctx, target.ref) for arch_ctx in _arch_contexts(ctx, plan)
               for target in plan.targets_on(arch_ctx.target_arch)]
    options = plan.options
    delta_options = DeltaOptions(key=plan.keys.signing, validity=options.validity,
                                 generator=options.delta_generator,
                                 cache_limit=options.delta_cache_limit,
                                 from_count=options.deltas_from, scratch=options.scratch_delta)
    made: list[Artifact] = []
    for report in generate_matrix(ctx, targets, delta_options):
        ctx.progress.info(report.text())
        made.append((f"static deltas + report, {report.ref}",
                     plan.layout.ref_deltas(report.ref)))
    return made


def _installer(ctx: Context, plan: BuildPlan) -> list[Artifact]:
    from builder.core.signing import export_public_key
    from builder.installer.media import MediaOptions, build_installer, installer_path

    public_key = None
    if plan.keys.release is not None:
        # Devices verify the commit with the public half of the release key.
        public = plan.layout.public_key(plan.keys.release.key_id)
        public.parent.mkdir(parents=True, exist_ok=True)
        public_key = export_public_key(ctx.runner, plan.keys.release, public)
    made: list[Artifact] = []
    for arch_ctx in _arch_contexts(ctx, plan):
        for target in plan.targets_on(arch_ctx.target_arch):
            build_installer(arch_ctx, target, MediaOptions(gpg_key=public_key))
            made.append((f"installer ISO (data ISO), {target.image}, {target.arch}",
                         installer_path(arch_ctx, target.image)))
    return made


STAGE_RUNNERS: dict[str, Callable[[Context, BuildPlan], list[Artifact]]] = {
    "rpms": _rpms, "blueprint": _blueprint, "compose": _compose, "sbom": _sbom,
    "bootc": _bootc, "deltas": _deltas, "installer": _installer}
