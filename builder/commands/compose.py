"""`compose`: a local ostree commit of a rendered blueprint."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from builder.commands.options import add_build_dir, add_signing_options
from builder.context import Context


def register(sub: Any) -> None:
    compose = sub.add_parser("compose", help="compose an ostree commit from a rendered blueprint")
    add_build_dir(compose)
    compose.add_argument("--image", default="microshift-full",
                         help="image profile (DIR/blueprints/NAME.toml; default microshift-full)")
    compose.add_argument("--ref", help="ostree ref to commit on (default: release.yaml "
                                       "ostree.ref, else the profile's ref)")
    compose.add_argument("--authfile", type=Path, help="registry auth file for skopeo")
    compose.add_argument("--allow-older", action="store_true",
                         help="compose onto a ref whose head is dated after this release "
                              "(source_date_epoch): only devices set to allow_downgrade: true "
                              "take it")
    add_signing_options(compose)
    compose.set_defaults(func=cmd_compose)


def cmd_compose(ctx: Context, args: argparse.Namespace) -> int:
    from builder.compose.commit import (
        KILL_ENV,
        ComposeOptions,
        compose_image,
        kill_at,
        no_checkpoint,
    )
    from builder.compose.inputs import load_compose_inputs
    from builder.plan import Keys, make_plan

    plan = make_plan(ctx, [args.image], keys=Keys.of(ctx, args.gpg_homedir, args.gpg_key),
                     ref=args.ref)
    # Inputs first: a missing blueprint must not leave a fresh signing key behind.
    for target in plan.targets:
        load_compose_inputs(ctx.build_dir, target.image, target.arch, ctx.release.evr)
    kill_stage = os.environ.get(KILL_ENV)
    options = ComposeOptions(
        key=plan.keys.signing,
        auth_file=args.authfile.resolve() if args.authfile else None,
        allow_older=args.allow_older,
        checkpoint=kill_at(kill_stage) if kill_stage else no_checkpoint)
    for target in plan.targets:
        compose_image(ctx.for_arch(target.arch), target, options)
    return 0
