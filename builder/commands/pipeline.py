"""`build-image`: the whole chain, as far as each stage is configured, in one command."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from builder.context import Context
from builder.progress import human_bytes

STAGES = ("rpms",)


def register(sub: Any) -> None:
    from builder.cli import add_build_dir

    parser = sub.add_parser("build-image", help="run the whole chain for the release")
    add_build_dir(parser)
    parser.add_argument("--image", default="microshift-full",
                        help="image profile to compose (default: microshift-full)")
    parser.add_argument("--until", choices=STAGES, default=STAGES[-1],
                        help="stop after this stage (default: run them all)")
    parser.set_defaults(func=cmd_build_image)


def cmd_build_image(ctx: Context, args: argparse.Namespace) -> int:
    from builder.rpms import build_release_rpms
    from builder.sample_base import build_sample_base

    started = time.monotonic()
    release = ctx.release  # validate before any work
    artifacts: list[tuple[str, Path]] = []
    with ctx.progress.step(f"build-image {release.evr} ({args.image})"):
        if any(repo.kind == "sample" for repo in release.base_repos):
            build_sample_base(ctx)
            artifacts.append(("sample base repository (SAMPLE)", ctx.path("sample-base", "repo")))
        build_release_rpms(ctx)
        artifacts += [("RPMs", ctx.path("rpms")), ("yum repository", ctx.path("repo"))]
    _report(ctx, artifacts, time.monotonic() - started)
    return 0


def _report(ctx: Context, artifacts: list[tuple[str, Path]], seconds: float) -> None:
    lines = [f"build-image finished in {seconds:.1f}s; artifacts:"]
    for label, path in artifacts:
        size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) \
            if path.is_dir() else path.stat().st_size
        lines.append(f"  {label:<34} {path}  ({human_bytes(size)})")
    ctx.progress.info("\n".join(lines))
