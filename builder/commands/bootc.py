"""`bootc`: each image's composed commit as a bootc container image (DIR/bootc/NAME/), and,
with --push, in a registry: by digest and tag, signed with the release key, its SBOM
attached (builder/bootc/)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from builder.commands.options import (
    add_build_dir,
    add_images_option,
    add_push_options,
    add_signing_options,
    push_target,
    selected_images,
)
from builder.context import Context


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "bootc", help="the image as a bootc container image (DIR/bootc/NAME/), optionally "
                      "pushed to a registry",
        description="Make each image's bootc container image from its composed commit: the "
                    "same tree, linted by bootc's rules, layers planned from the previous "
                    "build's plan (DIR/bootc/NAME.ARCH.plan.json), proved equal to the "
                    "commit; the update from the previous build's image also as tar-diffs "
                    "(DIR/bootc/NAME.ARCH.delta, an oci-delta layout). With --push, copy it "
                    "to REGISTRY/NAMESPACE/NAME by digest and tag, signed with the release "
                    "key, its SBOM attached.")
    add_build_dir(parser)
    add_images_option(parser, "make the bootc image of")
    parser.add_argument("--ref", help="ostree ref of the image's commits (default: the one "
                                      "`compose` uses)")
    parser.add_argument("--max-layers", type=int, default=64, metavar="N",
                        help="at most this many layers (default 64, as chunkah)")
    parser.add_argument("--previous-plan", type=Path, metavar="FILE",
                        help="the previous release's layer plan (default: the last build's "
                             "in DIR/bootc)")
    add_push_options(parser)
    add_signing_options(parser)
    parser.set_defaults(func=cmd_bootc)


def cmd_bootc(ctx: Context, args: argparse.Namespace) -> int:
    from builder.bootc.image import BootcOptions, build_bootc_image
    from builder.chain import push_bootc_image
    from builder.plan import BuildOptions, Keys, make_plan

    push = push_target(args)
    options = BootcOptions(max_layers=args.max_layers, previous_plan=args.previous_plan)
    plan = make_plan(ctx, selected_images(args), ref=args.ref,
                     keys=Keys.of(ctx, args.gpg_homedir, args.gpg_key),
                     options=BuildOptions(stages=("bootc",), push=push))
    for target in plan.targets:
        arch_ctx = ctx.for_arch(target.arch)
        built = build_bootc_image(arch_ctx, target, options)
        print(f"{target.image} {target.arch} {built.manifest.digest} "
              f"oci:{built.layout}:{target.arch}")
        if push is not None:
            print(f"{target.image} {target.arch} pushed "
                  f"{push_bootc_image(arch_ctx, plan, built)}")
    return 0
