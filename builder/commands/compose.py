"""`compose`, `deltas` and `apply-delta`: local ostree commits, static deltas, USB updates."""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from builder.commands.options import (
    add_build_dir,
    add_signing_options,
    add_validity_option,
    per_arch,
    ref_for_arch,
    signing_key,
    validity,
)
from builder.context import Context
from builder.core.errors import BuildError, InputError


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

    deltas = sub.add_parser("deltas", help="static deltas to the newest commit, and a report")
    add_build_dir(deltas)
    add_validity_option(deltas)
    target = deltas.add_mutually_exclusive_group()
    target.add_argument("--image", help="the image whose ref to use (default microshift-full)")
    target.add_argument("--ref", help="the ostree ref to make deltas for")
    deltas.add_argument("--from-count", type=int, default=None,
                        help="deltas from this many previous commits (default: release.yaml "
                             "ostree.deltas_from, 3)")
    deltas.add_argument("--no-offline", action="store_true",
                        help="skip the offline delta files in DIR/deltas/")
    deltas.add_argument("--no-scratch", action="store_true",
                        help="skip the delta from scratch (what a device with no commit of "
                             "the ref pulls)")
    deltas.add_argument("--memory-limit", metavar="SIZE",
                        help="memory for all delta generation at once, e.g. 8G (default: half "
                             "of this machine's memory); bsdiff of a file needs ~17x its size")
    deltas.add_argument("--jobs", type=int, default=None,
                        help="update paths generated at once (default: the number of cores)")
    add_signing_options(deltas)
    deltas.set_defaults(func=cmd_deltas)

    apply = sub.add_parser("apply-delta",
                           help="check an offline delta file, then apply it to an ostree repo "
                                "(USB updates)")
    apply.add_argument("--repo", type=Path, required=True, help="the device's ostree repo")
    apply.add_argument("delta", type=Path, help="a .delta file written by `deltas`")
    apply.add_argument("--verify-remote", metavar="REMOTE",
                       help="require the commit's GPG signature to verify with this remote's "
                            "keys (the device's update remote, added with --gpg-import)")
    apply.set_defaults(func=cmd_apply_delta)


def cmd_compose(ctx: Context, args: argparse.Namespace) -> int:
    from builder.compose.commit import (
        KILL_ENV,
        ComposeOptions,
        compose_image,
        kill_at,
        no_checkpoint,
    )
    from builder.compose.inputs import load_compose_inputs

    # Inputs first: a missing blueprint must not leave a fresh signing key behind.
    arch_ctxs = per_arch(ctx)
    refs = [ref_for_arch(ctx, arch_ctx, args.ref) for arch_ctx in arch_ctxs]
    for arch_ctx in arch_ctxs:
        load_compose_inputs(ctx.build_dir, args.image, arch_ctx.target_arch, ctx.release.evr)
    kill_stage = os.environ.get(KILL_ENV)
    options = ComposeOptions(
        key=signing_key(ctx, args),
        auth_file=args.authfile.resolve() if args.authfile else None,
        allow_older=args.allow_older,
        checkpoint=kill_at(kill_stage) if kill_stage else no_checkpoint)
    for arch_ctx, ref in zip(arch_ctxs, refs, strict=True):
        compose_image(arch_ctx, args.image, replace(options, ref=ref))
    return 0


def cmd_deltas(ctx: Context, args: argparse.Namespace) -> int:
    from builder.publish.deltas import DeltaOptions, generate_deltas

    if args.from_count is not None and args.from_count < 0:
        raise InputError("command line", "--from-count", "must be 0 or more")
    if not ctx.path("ostree", "repo", "config").is_file():
        raise BuildError(f"no ostree repository at {ctx.path('ostree', 'repo')}",
                         hint="run `python -m builder compose` first")
    from builder.publish.plan import parse_size

    if args.jobs is not None and args.jobs < 1:
        raise InputError("command line", "--jobs", "must be 1 or more")
    try:
        limit = parse_size(args.memory_limit) if args.memory_limit else None
    except ValueError as exc:
        raise InputError("command line", "--memory-limit", str(exc)) from None
    options = DeltaOptions(image=args.image or "microshift-full",
                           from_count=args.from_count, key=signing_key(ctx, args),
                           offline=not args.no_offline, memory_limit=limit, jobs=args.jobs,
                           scratch=not args.no_scratch, validity=validity(args))
    for arch_ctx in per_arch(ctx):
        ref = ref_for_arch(ctx, arch_ctx, args.ref)
        report = generate_deltas(arch_ctx, replace(options, ref=ref))
        print(report.text())
    return 0


def cmd_apply_delta(ctx: Context, args: argparse.Namespace) -> int:
    from builder.publish.offline import apply_offline

    commit = apply_offline(ctx.runner, args.repo.resolve(), args.delta.resolve(),
                           args.verify_remote)
    verified = (f", signature verified with remote {args.verify_remote!r}"
                if args.verify_remote else "; signature NOT verified (no --verify-remote)")
    ctx.progress.info(f"applied {args.delta}: {args.repo} now holds commit {commit}{verified}")
    return 0
