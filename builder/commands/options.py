"""Command-line options that several commands share, and what they turn into."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder.core.errors import InputError

if TYPE_CHECKING:  # stage modules are imported when a command runs, keeping --help fast
    from builder.plan import RegistryPush
    from builder.publish.rollout_statement import RolloutPlan


def add_build_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--build-dir", type=Path, default=Path("build"),
                        help="where every output goes (default: ./build)")


def add_images_option(parser: Any, what: str) -> None:
    """--image (repeatable) and --all-images; `parser` may be a mutually exclusive group."""
    parser.add_argument("--image", action="append", dest="images", metavar="IMAGE",
                        help=f"image profile to {what} (default: microshift-full); repeat it "
                             "for several images in one run")
    parser.add_argument("--all-images", action="store_true",
                        help=f"{what} every image of blueprints/profiles.yaml (the release "
                             "matrix: every profile for every architecture)")


def selected_images(args: argparse.Namespace) -> list[str]:
    """The images --image/--all-images name, in profiles.yaml's order for --all-images;
    an unknown image is an input error naming the allowed ones."""
    from builder.blueprint.render import load_profile, load_profiles

    if getattr(args, "all_images", False):
        return list(load_profiles())
    images = list(dict.fromkeys(args.images or ["microshift-full"]))
    for image in images:
        load_profile(image)
    return images


def add_delta_options(parser: argparse.ArgumentParser) -> None:
    """How deltas are made: the generator and its part cache."""
    parser.add_argument("--delta-generator", choices=("builder", "ostree"), default="builder",
                        help="builder: the builder's compiler (bsdiff on every core, each "
                             "part made once for every path and kept in DIR/cache/delta-parts); "
                             "ostree: `ostree static-delta generate` per path (default: builder)")
    parser.add_argument("--delta-cache-size", metavar="SIZE",
                        help="keep DIR/cache/delta-parts within this size, e.g. 8G (default 8G); "
                             "the parts used longest ago go first")


def delta_cache_limit(args: argparse.Namespace) -> int | None:
    if not args.delta_cache_size:
        return None
    from builder.publish.delta_knobs import parse_size

    try:
        return parse_size(args.delta_cache_size)
    except ValueError as exc:
        raise InputError("command line", "--delta-cache-size", str(exc)) from None


def add_push_options(parser: argparse.ArgumentParser) -> None:
    """Where bootc images go: a registry namespace, its TLS, the signatures' directory."""
    parser.add_argument("--push", metavar="REGISTRY/NAMESPACE",
                        help="push each bootc image to REGISTRY/NAMESPACE/NAME, e.g. "
                             "127.0.0.1:5000/microshift")
    parser.add_argument("--tls-verify", action=argparse.BooleanOptionalAction, default=True,
                        help="verify the registry's TLS certificate (default: yes)")
    parser.add_argument("--signatures", type=Path, metavar="DIR",
                        help="where the signatures are written, to publish beside the site "
                             "as the devices' lookaside (default: DIR/bootc/signatures)")


def push_target(args: argparse.Namespace) -> RegistryPush | None:
    from builder.plan import RegistryPush

    if args.push is None:
        return None
    namespace = args.push.strip("/")
    if "/" not in namespace:
        raise InputError("command line", "--push", f"{args.push!r} is not REGISTRY/NAMESPACE",
                         hint="e.g. 127.0.0.1:5000/microshift or quay.io/example")
    return RegistryPush(namespace, args.tls_verify, args.signatures)


def add_signing_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpg-homedir", type=Path,
                        help="GnuPG home with the signing key (default: the SAMPLE key in "
                             "DIR/gpg when the base is the SAMPLE base)")
    parser.add_argument("--gpg-key", help="key id or fingerprint to sign with")


def add_validity_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--index-validity", type=float, default=7.0, metavar="DAYS",
                        help="how long devices take the signed update index as current "
                             "(default 7); publish again before it ends")


def validity(args: argparse.Namespace) -> int:
    """--index-validity in seconds (builder/updater/freshness.py)."""
    days = float(args.index_validity)
    if not 0 < days <= 366:
        raise InputError("command line", "--index-validity", f"{days:g} is out of range; "
                         "allowed: more than 0 and at most 366 days")
    return int(days * 24 * 3600)


def add_rollout_options(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    """The waves of a rollout (builder/publish/rollout_statement.py), as `publish` and
    `rollout start` take them."""
    parser.add_argument("--rollout-waves", metavar="LIST", required=required,
                        help="roll the new head out in waves, e.g. 'site=lab,10%%,50%%': a "
                             "label selector (NAME=VALUE, several joined by '+') or a "
                             "cumulative share of the fleet; a last wave of 100%% is added")
    parser.add_argument("--rollout-soak", default="0", metavar="DURATION",
                        help="how long each wave runs before `rollout advance` may open the "
                             "next (seconds, or 30m, 6h, 2d; default 0)")
    parser.add_argument("--rollout-success", type=float, default=95.0, metavar="PERCENT",
                        help="share of a wave's reporting devices that must be green before "
                             "the next wave opens (default 95)")
    parser.add_argument("--rollout-halt", type=float, default=20.0, metavar="PERCENT",
                        help="the collector halts the rollout when more than this share of a "
                             "wave's devices that staged it rolled back (default 20)")
    parser.add_argument("--rollout-id", default="", metavar="ID",
                        help="the rollout's id, which places each device (default: REF-COMMIT, "
                             "a new draw for every head; keep one id to keep the same "
                             "devices first)")
    parser.add_argument("--rollout-budget", metavar="LABEL=MAX",
                        help="a disruption budget: at most MAX devices of each LABEL group "
                             "(e.g. site=1, or site=25%% of the group's known devices) update "
                             "at once; the collector grants the slots")
    parser.add_argument("--rollout-window", action="append", default=[],
                        metavar="GROUP:WINDOWS",
                        help="update windows of a label group, replacing update.yaml's for "
                             "its devices, e.g. 'site=lab:apply=Sat,Sun 01:00-05:00;"
                             "download=22:00-06:00;tz=UTC' (repeatable; the first that "
                             "matches a device applies)")


def rollout_plan(args: argparse.Namespace) -> RolloutPlan | None:
    from builder.publish.rollout_statement import (
        RolloutPlan,
        check_id,
        parse_budget_option,
        parse_waves,
        parse_window_option,
    )

    if not args.rollout_waves:
        for option, given in (("--rollout-budget", args.rollout_budget),
                              ("--rollout-window", args.rollout_window)):
            if given:
                raise InputError("command line", option, "belongs to a rollout: give "
                                 "--rollout-waves too")
        return None
    waves = parse_waves(args.rollout_waves, soak=args.rollout_soak,
                        success=args.rollout_success, halt=args.rollout_halt)
    budget = parse_budget_option(args.rollout_budget) if args.rollout_budget else None
    windows = tuple(parse_window_option(text) for text in args.rollout_window)
    return RolloutPlan(waves, check_id(args.rollout_id), budget, windows)
