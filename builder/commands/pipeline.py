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
    add_push_options,
    add_signing_options,
    add_validity_option,
    delta_cache_limit,
    push_target,
    selected_images,
    validity,
)
from builder.context import Context
from builder.core.progress import human_bytes
from builder.plan import STAGES, BuildOptions


def register(sub: Any) -> None:
    parser = sub.add_parser("build-image", help="run the whole chain for the release")
    add_build_dir(parser)
    add_validity_option(parser)
    add_images_option(parser, "build")
    parser.add_argument("--until", choices=STAGES, default=STAGES[-1],
                        help="stop after this stage (default: run them all)")
    add_signing_options(parser)
    add_delta_options(parser)
    add_push_options(parser)
    parser.set_defaults(func=cmd_build_image)


def cmd_build_image(ctx: Context, args: argparse.Namespace) -> int:
    from builder.chain import run_chain
    from builder.plan import Keys, make_plan

    started = time.monotonic()
    release = ctx.release  # validate before any work
    images = selected_images(args)  # an unknown image fails now, not after the RPMs
    options = BuildOptions(stages=STAGES[:STAGES.index(args.until) + 1],
                           validity=validity(args), delta_generator=args.delta_generator,
                           delta_cache_limit=delta_cache_limit(args), push=push_target(args))
    plan = make_plan(ctx, images, keys=Keys.of(ctx, args.gpg_homedir, args.gpg_key),
                     options=options)
    with ctx.progress.step(f"build-image {release.evr} ({', '.join(images)}; "
                           f"{', '.join(release.architectures)})"):
        artifacts = run_chain(ctx, plan)
    _report(ctx, artifacts, time.monotonic() - started)
    return 0


def _report(ctx: Context, artifacts: list[tuple[str, Path]], seconds: float) -> None:
    lines = [f"build-image finished in {seconds:.1f}s; artifacts:"]
    for label, path in artifacts:
        size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) \
            if path.is_dir() else path.stat().st_size
        lines.append(f"  {label:<34} {path}  ({human_bytes(size)})")
    ctx.progress.info("\n".join(lines))
