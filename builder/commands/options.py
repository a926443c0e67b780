"""Command-line options that several commands share, and what they turn into."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from builder.context import Context
from builder.core.errors import InputError

if TYPE_CHECKING:  # stage modules are imported when a command runs, keeping --help fast
    from builder.core.signing import SigningKey


def per_arch(ctx: Context) -> list[Context]:
    """The run once per architecture (release.yaml's, or the one `--arch` names), for the
    stages that build one architecture at a time: compose, SBOM, deltas, installer."""
    return [ctx.for_arch(arch) for arch in ctx.release.architectures]


def ref_for_arch(run: Context, arch_ctx: Context, ref: str | None) -> str | None:
    """An explicit --ref for one architecture of the run: `{arch}` is replaced; a ref
    without it cannot hold the commits of several architectures."""
    if ref is None:
        return None
    if "{arch}" not in ref and len(run.release.architectures) > 1:
        raise InputError("command line", "--ref",
                         f"{ref!r} would hold the commits of "
                         f"{', '.join(run.release.architectures)}",
                         hint="put {arch} in the ref, or build one architecture with --arch")
    return ref.replace("{arch}", arch_ctx.target_arch)


def add_build_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--build-dir", type=Path, default=Path("build"),
                        help="where every output goes (default: ./build)")


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


def signing_key(ctx: Context, args: argparse.Namespace) -> SigningKey | None:
    """--gpg-homedir/--gpg-key, else the SAMPLE key for a release on the SAMPLE base."""
    from builder.core.signing import release_signing_key

    sample = ctx.release.ostree.base.is_sample
    return release_signing_key(ctx.runner, ctx.progress, args.gpg_homedir, args.gpg_key,
                               sample_home=ctx.path("gpg") if sample else None,
                               epoch=ctx.release.source_date_epoch)
