"""`build-image`: the whole chain, from release.yaml to published ostree deltas, in one command."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from builder.commands.options import (
    add_build_dir,
    add_delta_options,
    add_images_option,
    add_signing_options,
    add_validity_option,
    delta_cache_limit,
    per_arch,
    selected_images,
    signing_key,
    validity,
)
from builder.context import Context
from builder.core.progress import human_bytes

STAGES = ("rpms", "blueprint", "compose", "sbom", "deltas", "installer")
# Built once per architecture of the run, each architecture after the other (and each image
# of it); the deltas of every image and architecture are one job (builder/publish/deltas.py).
PER_ARCH = ("compose", "sbom", "installer")


def register(sub: Any) -> None:
    parser = sub.add_parser("build-image", help="run the whole chain for the release")
    add_build_dir(parser)
    add_validity_option(parser)
    add_images_option(parser, "build")
    parser.add_argument("--until", choices=STAGES, default=STAGES[-1],
                        help="stop after this stage (default: run them all)")
    add_signing_options(parser)
    add_delta_options(parser)
    parser.set_defaults(func=cmd_build_image)


def cmd_build_image(ctx: Context, args: argparse.Namespace) -> int:
    started = time.monotonic()
    release = ctx.release  # validate before any work
    args.image_list = selected_images(args)  # an unknown image fails now, not after the RPMs
    args.cache_limit = delta_cache_limit(args)
    # A release key given by the user signs everything: RPMs, repomd.xml, commits, summary.
    # Without one, the sample flow signs only the ostree commits and summary with its
    # throwaway key: their signatures are detached, so sample builds stay byte-identical.
    args.user_key = signing_key(ctx, args) if args.gpg_key or args.gpg_homedir else None
    artifacts: list[tuple[str, Path]] = []
    with ctx.progress.step(f"build-image {release.evr} ({', '.join(args.image_list)}; "
                           f"{', '.join(release.architectures)})"):
        for stage in STAGES[:STAGES.index(args.until) + 1]:
            for stage_ctx in per_arch(ctx) if stage in PER_ARCH else [ctx]:
                artifacts += RUNNERS[stage](stage_ctx, args)
    _report(ctx, artifacts, time.monotonic() - started)
    return 0


def _rpms(ctx: Context, args: argparse.Namespace) -> list[tuple[str, Path]]:
    from builder.rpm.packages import build_release_rpms
    from builder.rpm.payloads import check_payloads
    from builder.rpm.sample_base import build_sample_base

    check_payloads(ctx)
    found: list[tuple[str, Path]] = []
    if any(repo.kind == "sample" for repo in ctx.release.base_repos):
        build_sample_base(ctx)
        found.append(("sample base repository (SAMPLE)", ctx.path("sample-base", "repo")))
    build_release_rpms(ctx, key=args.user_key)
    return [*found, ("RPMs", ctx.path("rpms")),
            *((f"yum repository, {arch}", ctx.path("repo", arch))
              for arch in ctx.release.architectures)]


def _blueprint(ctx: Context, args: argparse.Namespace) -> list[tuple[str, Path]]:
    from builder.blueprint.build import build_blueprint

    for image in args.image_list:
        build_blueprint(ctx, image)
    return [("blueprints + lock files", ctx.path("blueprints"))]


def _compose(ctx: Context, args: argparse.Namespace) -> list[tuple[str, Path]]:
    from builder.compose.commit import ComposeOptions, compose_image

    for image in args.image_list:
        result = compose_image(ctx, image, ComposeOptions(key=signing_key(ctx, args)))
        ctx.progress.info(f"commit {result.commit} on {result.ref}")
    return [(f"ostree repository, {ctx.target_arch}", ctx.path("ostree", "repo"))]


def _sbom(ctx: Context, args: argparse.Namespace) -> list[tuple[str, Path]]:
    from builder.publish.sbom import write_sbom

    return [(f"SBOM (SPDX 2.3), {image}, {ctx.target_arch}", write_sbom(ctx, image))
            for image in args.image_list]


def _deltas(ctx: Context, args: argparse.Namespace) -> list[tuple[str, Path]]:
    """Every image of every architecture: the matrix's paths in one job."""
    from builder.blueprint.target import image_target
    from builder.publish.deltas import DeltaOptions, DeltaTarget, generate_matrix

    targets = [DeltaTarget(arch_ctx, image_target(arch_ctx, image).ref)
               for arch_ctx in per_arch(ctx) for image in args.image_list]
    options = DeltaOptions(key=signing_key(ctx, args), validity=validity(args),
                           generator=args.delta_generator, cache_limit=args.cache_limit)
    found = []
    for report in generate_matrix(ctx, targets, options):
        ctx.progress.info(report.text())
        found.append((f"static deltas + report, {report.ref}", ctx.path("deltas", report.ref)))
    return found


def _installer(ctx: Context, args: argparse.Namespace) -> list[tuple[str, Path]]:
    from builder.core.signing import export_public_key
    from builder.installer.media import MediaOptions, build_installer, installer_path

    public_key = None
    if args.user_key is not None:
        # Devices verify the commit with the public half of the release key.
        public = ctx.path("keys", f"{args.user_key.key_id}.asc")
        public.parent.mkdir(parents=True, exist_ok=True)
        public_key = export_public_key(ctx.runner, args.user_key, public)
    found = []
    for image in args.image_list:
        build_installer(ctx, MediaOptions(image=image, gpg_key=public_key))
        found.append((f"installer ISO (data ISO), {image}, {ctx.target_arch}",
                      installer_path(ctx, image)))
    return found


RUNNERS = {"rpms": _rpms, "blueprint": _blueprint, "compose": _compose, "sbom": _sbom,
           "deltas": _deltas, "installer": _installer}


def _report(ctx: Context, artifacts: list[tuple[str, Path]], seconds: float) -> None:
    lines = [f"build-image finished in {seconds:.1f}s; artifacts:"]
    for label, path in artifacts:
        size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) \
            if path.is_dir() else path.stat().st_size
        lines.append(f"  {label:<34} {path}  ({human_bytes(size)})")
    ctx.progress.info("\n".join(lines))
