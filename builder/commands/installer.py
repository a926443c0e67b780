"""`installer`: the installer ISO of an image (DIR/installer/NAME.iso; NAME-ARCH.iso, one per
architecture, for a release of several).

    python -m builder installer --image NAME [--boot-iso rhel-9-boot.iso] [--url URL] ...

Takes the image's commit from DIR/ostree/repo and the `embedded` kickstart (same options as
`kickstart`). With --boot-iso the result boots Anaconda and installs unattended; without it,
it is a data ISO, whose kickstart mounts it by its volume id when a stock RHEL boot ISO is
booted with inst.ks=hd:LABEL=<volume id>:/ks.cfg.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

from builder.commands.options import (
    add_build_dir,
    add_media_options,
    media_options,
    per_arch,
    ref_for_arch,
)
from builder.context import Context
from builder.core.errors import InputError


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "installer", help="build an image's installer ISO (DIR/installer/NAME.iso)",
        description="Put the image's ostree commit, its embedded kickstart and a manifest on "
                    "an ISO; with --boot-iso, inject them into a RHEL boot ISO with inst.ks= "
                    "on every boot entry, as lorax's mkksiso does.")
    add_build_dir(parser)
    add_media_options(parser)
    parser.add_argument("--boot-iso", type=Path, metavar="PATH",
                        help="RHEL 9 boot ISO to make an unattended installer from")
    parser.set_defaults(func=cmd_installer)


def cmd_installer(ctx: Context, args: argparse.Namespace) -> int:
    from builder.installer.media import build_installer

    if args.boot_iso is not None and len(ctx.release.architectures) > 1:
        raise InputError("command line", "--boot-iso",
                         "a boot ISO boots one architecture; the release builds "
                         f"{', '.join(ctx.release.architectures)}",
                         hint="add --arch ARCH, with that architecture's boot ISO")
    for arch_ctx in per_arch(ctx):
        build_installer(arch_ctx, replace(media_options(args),
                                          ref=ref_for_arch(ctx, arch_ctx, args.ref)))
    return 0
