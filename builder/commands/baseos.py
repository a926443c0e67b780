"""`bootable-base`: the SAMPLE bootable base OS commit (Debian packages, mmdebstrap)."""

from __future__ import annotations

import argparse
from typing import Any

from builder.commands.options import add_build_dir
from builder.context import Context


def register(sub: Any) -> None:
    base = sub.add_parser(
        "bootable-base",
        help="build the SAMPLE bootable base OS commit from Debian 12 packages (mmdebstrap, "
             "needs root and a Debian mirror) into BUILD_DIR/baseos/repo")
    add_build_dir(base)
    base.add_argument("--mirror", help="Debian mirror (default: http://deb.debian.org/debian)")
    base.set_defaults(func=cmd_bootable_base)


def cmd_bootable_base(ctx: Context, args: argparse.Namespace) -> int:
    from builder.baseos.bootable import ensure_bootable_base
    from builder.rpm.sample_base import build_sample_base

    arch = ctx.arch or ctx.release.architectures[0]
    build_sample_base(ctx)  # the stand-ins its rpm database records
    base = ensure_bootable_base(ctx.for_arch(arch), args.mirror)
    ctx.progress.info(f"to compose onto it, in release.yaml: {base.release_snippet()}")
    return 0
