"""`kickstart`: render, validate and write the kickstart of an image.

    python -m builder kickstart --image NAME --url http://server/repo [--pull-secret FILE]
    python -m builder kickstart --image NAME --embedded [--url http://server/repo]

The image's facts (storage component, MicroShift configuration, greenboot attempts,
firewall sources) come from its rendered blueprint, DIR/blueprints/NAME.toml.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from builder.commands.options import (
    add_build_dir,
    add_media_options,
    media_options,
    per_arch,
    ref_for_arch,
)
from builder.context import Context


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "kickstart", help="render and validate an image's kickstart (DIR/kickstart/)",
        description="Write DIR/kickstart/NAME-network.ks (install over the network from --url) "
                    "or, with --embedded, DIR/kickstart/NAME-embedded.ks (install from the "
                    "repo on the installer ISO).")
    add_build_dir(parser)
    add_media_options(parser)
    parser.add_argument("--embedded", action="store_true",
                        help="install from the ostree repo on the installer ISO; --url then "
                             "only names the update server")
    parser.set_defaults(func=cmd_kickstart)


def cmd_kickstart(ctx: Context, args: argparse.Namespace) -> int:
    from builder.installer.media import write_kickstart_file

    variant = "embedded" if args.embedded else "network"
    for arch_ctx in per_arch(ctx):
        write_kickstart_file(arch_ctx, replace(media_options(args),
                                               ref=ref_for_arch(ctx, arch_ctx, args.ref)), variant)
    return 0
