"""`deltas`, `apply-delta`, `sbom`, `diff`, `publish` and `pull-published`: static deltas and
USB updates, what a release holds, what an update changes, and putting the repository where
devices pull from."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from builder.commands.options import (
    add_build_dir,
    add_delta_options,
    add_images_option,
    add_rollout_options,
    add_signing_options,
    add_validity_option,
    delta_cache_limit,
    rollout_plan,
    selected_images,
    validity,
)
from builder.context import Context
from builder.core.errors import BuildError, InputError


def register(sub: Any) -> None:
    _register_deltas(sub)
    _register_apply_delta(sub)
    _register_sbom(sub)
    _register_diff(sub)
    _register_publish(sub)
    _register_pull_published(sub)


def _register_deltas(sub: Any) -> None:
    deltas = sub.add_parser("deltas", help="static deltas to the newest commit, and a report")
    add_build_dir(deltas)
    add_validity_option(deltas)
    target = deltas.add_mutually_exclusive_group()
    add_images_option(target, "make deltas for")
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
                             "of this machine's memory); bsdiff of a file needs ~8x its size "
                             "(ostree's generator: ~17x)")
    deltas.add_argument("--jobs", type=int, default=None,
                        help="parts (ostree's generator: update paths) made at once (default: "
                             "the number of cores)")
    add_delta_options(deltas)
    add_signing_options(deltas)
    deltas.set_defaults(func=cmd_deltas)


def _register_apply_delta(sub: Any) -> None:
    apply = sub.add_parser("apply-delta",
                           help="check an offline delta file, then apply it to an ostree repo "
                                "(USB updates)")
    apply.add_argument("--repo", type=Path, required=True, help="the device's ostree repo")
    apply.add_argument("delta", type=Path, help="a .delta file written by `deltas`")
    apply.add_argument("--verify-remote", metavar="REMOTE",
                       help="require the commit's GPG signature to verify with this remote's "
                            "keys (the device's update remote, added with --gpg-import)")
    apply.set_defaults(func=cmd_apply_delta)


def _register_sbom(sub: Any) -> None:
    sbom = sub.add_parser("sbom", help="write the SPDX SBOM of an image's commit "
                                       "(DIR/sbom/NAME.spdx.json; NAME-ARCH.spdx.json "
                                       "for a release of several architectures)")
    add_build_dir(sbom)
    sbom.add_argument("--image", default="microshift-full",
                      help="image profile (default microshift-full)")
    sbom.add_argument("--ref", help="ostree ref of the commit (default: the image's ref)")
    sbom.set_defaults(func=cmd_sbom)


def _register_diff(sub: Any) -> None:
    diff = sub.add_parser(
        "diff", help="what an update from one commit to another changes, and its size",
        description="Packages added, removed and changed, images changed (old and new "
                    "digest), and the download of the update path, between two commits of "
                    "DIR/ostree/repo. FROM and TO are commit checksums (or unique prefixes), "
                    "refs, or REF^ for a ref's parent.")
    add_build_dir(diff)
    diff.add_argument("from_rev", metavar="FROM")
    diff.add_argument("to_rev", metavar="TO")
    diff.add_argument("--format", choices=("text", "json"), default="text",
                      help="output on stdout (default: text)")
    diff.set_defaults(func=cmd_diff)


def _register_publish(sub: Any) -> None:
    publish = sub.add_parser(
        "publish", help="upload the ostree repository, SBOMs and update reports: objects "
                        "first, refs and summary last")
    add_build_dir(publish)
    add_validity_option(publish)
    publish.add_argument("--to", required=True, metavar="TARGET",
                         help="a directory, an rsync destination ([user@]host:path, "
                              "rsync://...) or s3://bucket/prefix (aws CLI)")
    publish.add_argument("--merge", type=Path, action="append", default=[], metavar="DIR",
                         help="another build directory whose refs to publish too (one per "
                              "image and architecture of a CI matrix); repeatable")
    add_rollout_options(publish)
    publish.add_argument("--rollouts-from", type=Path, metavar="DIR",
                         help="the local copy of the published site that the `rollout` "
                              "commands work on (default: --to, when it is a directory): "
                              "its running rollouts go on in the statements published")
    add_signing_options(publish)
    publish.set_defaults(func=cmd_publish)


def _register_pull_published(sub: Any) -> None:
    pull = sub.add_parser(
        "pull-published", help="mirror a ref's published history into DIR/ostree/repo, so "
                               "the next commit continues it and deltas start from it")
    add_build_dir(pull)
    pull.add_argument("--url", required=True, help="the published repository (.../repo)")
    target = pull.add_mutually_exclusive_group()
    target.add_argument("--image", default="microshift-full",
                        help="the image whose ref to pull (default microshift-full)")
    target.add_argument("--ref", help="the ostree ref to pull")
    pull.add_argument("--depth", type=int, default=None,
                      help="commits to pull (default: release.yaml ostree.deltas_from + 1)")
    add_signing_options(pull)
    pull.set_defaults(func=cmd_pull_published)


def cmd_sbom(ctx: Context, args: argparse.Namespace) -> int:
    from builder.plan import image_targets
    from builder.publish.sbom import write_sbom

    for target in image_targets(ctx, [args.image], args.ref):
        print(write_sbom(ctx.for_arch(target.arch), target))
    return 0


def cmd_diff(ctx: Context, args: argparse.Namespace) -> int:
    from builder.core.ostree import Repo
    from builder.publish.update_report import update_report

    report = update_report(Repo(ctx.layout.ostree_repo, ctx.runner), args.from_rev,
                           args.to_rev)
    sys.stdout.write(report.to_json() if args.format == "json" else report.text() + "\n")
    return 0


def cmd_publish(ctx: Context, args: argparse.Namespace) -> int:
    from builder.core.signing import release_signing_key
    from builder.publish.upload import PublishOptions, publish

    # A release key signs the merged summary; without one the SAMPLE key of this build dir
    # does, when there is one (publish never makes a new key: devices would not know it).
    seconds = validity(args)
    plan = rollout_plan(args)
    sample_home = ctx.layout.sample_gpg_home
    key = release_signing_key(ctx.runner, ctx.progress, args.gpg_homedir, args.gpg_key,
                              sample_home=sample_home if sample_home.is_dir() else None,
                              epoch=ctx.release.source_date_epoch)
    for build in args.merge:
        if not build.is_dir():
            raise InputError("command line", "--merge", f"{build} is not a directory")
    if plan is not None and key is None:
        raise InputError("command line", "--rollout-waves", "a rollout is carried by the "
                         "signed statement: publish with --gpg-key (or a build directory with "
                         "its SAMPLE key)")
    result = publish(ctx, PublishOptions(target=args.to, merge=tuple(args.merge), key=key,
                                         validity=seconds, rollout=plan,
                                         rollouts_from=args.rollouts_from))
    ctx.progress.info(f"published {len(result.refs)} refs, {result.sboms} SBOMs and "
                      f"{result.reports} update reports to {result.target}")
    return 0


def cmd_pull_published(ctx: Context, args: argparse.Namespace) -> int:
    from builder.plan import Keys, image_targets
    from builder.publish.history import pull_published

    depth = args.depth if args.depth is not None else ctx.release.ostree.deltas_from + 1
    key = Keys.of(ctx, args.gpg_homedir, args.gpg_key).release
    for target in image_targets(ctx, [args.image], args.ref):
        pull_published(ctx.for_arch(target.arch), args.url, target.ref, depth, key)
    return 0


def cmd_deltas(ctx: Context, args: argparse.Namespace) -> int:
    from builder.plan import Keys, image_targets
    from builder.publish.deltas import DeltaOptions, DeltaTarget, generate_matrix

    if args.from_count is not None and args.from_count < 0:
        raise InputError("command line", "--from-count", "must be 0 or more")
    seconds = validity(args)  # every argument is checked before the build directory
    if args.jobs is not None and args.jobs < 1:
        raise InputError("command line", "--jobs", "must be 1 or more")
    from builder.publish.delta_knobs import parse_size

    try:
        limit = parse_size(args.memory_limit) if args.memory_limit else None
    except ValueError as exc:
        raise InputError("command line", "--memory-limit", str(exc)) from None
    cache_limit = delta_cache_limit(args)
    # With --ref, the ref alone (of whichever image it holds).
    images = ["microshift-full"] if args.ref else selected_images(args)
    if not (ctx.layout.ostree_repo / "config").is_file():
        raise BuildError(f"no ostree repository at {ctx.layout.ostree_repo}",
                         hint="run `python -m builder compose` first")
    options = DeltaOptions(from_count=args.from_count,
                           key=Keys.of(ctx, args.gpg_homedir, args.gpg_key).signing,
                           offline=not args.no_offline, memory_limit=limit, jobs=args.jobs,
                           scratch=not args.no_scratch, validity=seconds,
                           generator=args.delta_generator, cache_limit=cache_limit)
    targets = [DeltaTarget(ctx.for_arch(target.arch), target.ref)
               for target in image_targets(ctx, images, args.ref)]
    for report in generate_matrix(ctx, targets, options):
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
