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
    add_signing_options,
    selected_images,
)
from builder.context import Context
from builder.core.errors import InputError


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "bootc", help="the image as a bootc container image (DIR/bootc/NAME/), optionally "
                      "pushed to a registry",
        description="Make each image's bootc container image from its composed commit: the "
                    "same tree, linted by bootc's rules, layers planned from the previous "
                    "build's plan (DIR/bootc/NAME.ARCH.plan.json), proved equal to the "
                    "commit. With --push, copy it to REGISTRY/NAMESPACE/NAME by digest and "
                    "tag, signed with the release key, its SBOM attached.")
    add_build_dir(parser)
    add_images_option(parser, "make the bootc image of")
    parser.add_argument("--ref", help="ostree ref of the image's commits (default: the one "
                                      "`compose` uses)")
    parser.add_argument("--max-layers", type=int, default=64, metavar="N",
                        help="at most this many layers (default 64, as chunkah)")
    parser.add_argument("--previous-plan", type=Path, metavar="FILE",
                        help="the previous release's layer plan (default: the last build's "
                             "in DIR/bootc)")
    parser.add_argument("--push", metavar="REGISTRY/NAMESPACE",
                        help="push to this registry namespace, e.g. 127.0.0.1:5000/microshift")
    parser.add_argument("--tls-verify", action=argparse.BooleanOptionalAction, default=True,
                        help="verify the registry's TLS certificate (default: yes)")
    parser.add_argument("--signatures", type=Path, metavar="DIR",
                        help="where the signatures are written, to publish beside the site "
                             "as the devices' lookaside (default: DIR/bootc/signatures)")
    add_signing_options(parser)
    parser.set_defaults(func=cmd_bootc)


def cmd_bootc(ctx: Context, args: argparse.Namespace) -> int:
    from builder.bootc.image import BootcOptions, build_bootc_image
    from builder.bootc.publish import PushOptions, push_image
    from builder.plan import Keys, image_targets

    if args.push is not None and "/" not in args.push.strip("/"):
        raise InputError("command line", "--push", f"{args.push!r} is not REGISTRY/NAMESPACE",
                         hint="e.g. 127.0.0.1:5000/microshift or quay.io/example")
    options = BootcOptions(max_layers=args.max_layers, previous_plan=args.previous_plan)
    images = selected_images(args)
    keys = Keys.of(ctx, args.gpg_homedir, args.gpg_key)
    for target in image_targets(ctx, images, args.ref):
        built = build_bootc_image(ctx.for_arch(target.arch), target, options)
        print(f"{target.image} {target.arch} {built.manifest.digest} "
              f"oci:{built.layout}:{target.arch}")
        if args.push is not None:
            pushed = push_image(ctx.for_arch(target.arch), built, PushOptions(
                namespace=args.push.strip("/"), key=keys.signing,
                signatures=args.signatures or ctx.layout.bootc_signatures,
                tls_verify=args.tls_verify))
            print(f"{target.image} {target.arch} pushed {pushed.by_digest} "
                  f"({pushed.reference})")
    return 0
