"""`rpms` and `sample-base`: build the packages and their repositories."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from builder.commands.options import add_build_dir
from builder.context import Context


def register(sub: Any) -> None:
    rpms = sub.add_parser("rpms", help="render specs, build RPMs and the yum repository")
    add_build_dir(rpms)
    rpms.add_argument("--no-lint", action="store_true", help="skip rpmlint on built RPMs")
    rpms.add_argument("--gpg-homedir", type=Path,
                      help="GnuPG home with the key to sign the RPMs and repomd.xml with")
    rpms.add_argument("--gpg-key", help="key id or fingerprint (unsigned when not given)")
    rpms.set_defaults(func=cmd_rpms)
    base = sub.add_parser("sample-base",
                          help="build the SAMPLE base OS repository of stand-in RPMs")
    add_build_dir(base)
    base.set_defaults(func=cmd_sample_base)


def cmd_rpms(ctx: Context, args: argparse.Namespace) -> int:
    from builder.plan import Keys
    from builder.rpm.packages import build_release_rpms

    key = Keys.of(ctx, args.gpg_homedir, args.gpg_key).release  # the SAMPLE key signs no RPM
    build_release_rpms(ctx, lint=not args.no_lint, key=key)
    return 0


def cmd_sample_base(ctx: Context, args: argparse.Namespace) -> int:
    from builder.rpm.sample_base import build_sample_base

    ctx.release  # validate release.yaml before any work  # noqa: B018
    build_sample_base(ctx)
    return 0
