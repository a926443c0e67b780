"""`kickstart`: render, validate and write the kickstart of an image.

    python -m builder kickstart --image NAME --url http://server/repo [--pull-secret FILE]
    python -m builder kickstart --image NAME --embedded [--url http://server/repo]

The image's facts (storage component, MicroShift configuration, greenboot attempts,
firewall sources) come from its rendered blueprint, DIR/blueprints/NAME.toml.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from builder.context import Context

DEFAULT_REF = "rhel/9/{arch}/edge"


def register(sub: Any) -> None:
    from builder.cli import add_build_dir

    parser = sub.add_parser(
        "kickstart", help="render and validate an image's kickstart (DIR/kickstart/)",
        description="Write DIR/kickstart/NAME-network.ks (install over the network from --url) "
                    "or, with --embedded, DIR/kickstart/NAME-embedded.ks (install from the "
                    "repo on the installer ISO).")
    add_build_dir(parser)
    add_kickstart_options(parser)
    parser.add_argument("--embedded", action="store_true",
                        help="install from the ostree repo on the installer ISO; --url then "
                             "only names the update server")
    parser.set_defaults(func=cmd_kickstart)


def add_kickstart_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by `kickstart` and `installer`."""
    parser.add_argument("--image", required=True, metavar="NAME",
                        help="image name (DIR/blueprints/NAME.toml)")
    parser.add_argument("--url", metavar="URL",
                        help="the ostree repo devices pull upgrades from (http[s]://...)")
    parser.add_argument("--ref", metavar="REF",
                        help="ostree ref of the image's commits (default: the one `compose` "
                             f"uses: release.yaml ostree.ref, the profile's, else {DEFAULT_REF})")
    parser.add_argument("--pull-secret", type=Path, metavar="FILE",
                        help="CRI-O pull secret (JSON); written to /etc/crio/openshift-pull-"
                             "secret on the device and never logged")
    parser.add_argument("--gpg-key", type=Path, metavar="FILE",
                        help="ASCII-armored public key the commits are signed with")
    parser.add_argument("--ssh-key", type=Path, metavar="FILE",
                        help="SSH public key for the admin user 'redhat' (default: no user)")
    parser.add_argument("--microshift-config", type=Path, metavar="FILE",
                        help="/etc/microshift/config.yaml for the device (default: the "
                             "blueprint's)")
    parser.add_argument("--storage", action=argparse.BooleanOptionalAction, default=None,
                        help="leave free volume group space for TopoLVM (default: when the "
                             "blueprint has microshift-storage-topolvm)")


def cmd_kickstart(ctx: Context, args: argparse.Namespace) -> int:
    from builder.errors import InputError
    from builder.kickstart import render, write_kickstart

    variant = "embedded" if args.embedded else "network"
    if variant == "network" and not args.url:
        raise InputError("command line", "--url",
                         "the network kickstart installs from an ostree repo on a server",
                         hint="pass --url http://SERVER/repo, or --embedded for the ISO")
    with ctx.progress.step(f"kickstart {args.image} ({variant})"):
        ks = kickstart_context(ctx, args, variant)
        text = render(variant, ks)
        out = ctx.path("kickstart", f"{args.image}-{variant}.ks")
        size = write_kickstart(out, text, private=ks.pull_secret is not None)
        ctx.progress.info("validated with pykickstart (RHEL 9 syntax)")
        ctx.progress.wrote(str(out), size)
    return 0


def image_ref(ctx: Context, args: argparse.Namespace) -> str:
    """--ref, else the ref the compose step puts the image's commits on."""
    from builder.compose import image_ref as compose_ref

    return str(args.ref) if args.ref else compose_ref(ctx, args.image)


def kickstart_context(ctx: Context, args: argparse.Namespace, variant: str) -> Any:
    """The KickstartContext for `variant` from the command line and the image's blueprint."""
    from builder.kickstart import EMBEDDED_REPO_URL, KickstartContext, load_image_facts

    facts = load_image_facts(ctx.path("blueprints", f"{args.image}.toml"), args.image)
    ref = image_ref(ctx, args)
    repo = ctx.path("ostree", "repo")
    gpg_key: Path | None = args.gpg_key
    if args.microshift_config:
        from builder.components_config import load_config

        # The same strict check MicroShift's loader applies: a bad file fails here, once,
        # not on every device it is installed to.
        load_config(args.microshift_config)
    commit = _local_commit(ctx, repo, ref)
    if commit is not None:
        gpg_key = _verifying_key(ctx, repo, ref, commit, gpg_key)
    signed = gpg_key is not None
    return KickstartContext(
        image=args.image,
        install_url=EMBEDDED_REPO_URL if variant == "embedded" else args.url,
        ref=ref,
        update_url=args.url,
        gpg_verify=signed,
        gpg_key=gpg_key,
        microshift_config=_read_text(args.microshift_config, "--microshift-config")
        if args.microshift_config else facts.microshift_config,
        greenboot_max_boot_attempts=facts.max_boot_attempts,
        pull_secret=args.pull_secret,
        storage=facts.storage if args.storage is None else args.storage,
        trusted_sources=facts.trusted_sources,
        ssh_key=_read_text(args.ssh_key, "--ssh-key").strip() if args.ssh_key else None,
    )


def _verifying_key(ctx: Context, repo: Path, ref: str, commit: str,
                   key: Path | None) -> Path | None:
    """The public key devices verify the local commit with; None when it is unsigned.

    Checked against the commit, so that a wrong key fails here and not on every device.
    Without --gpg-key the SAMPLE key that `compose` signs with by default is tried.
    """
    from builder.errors import InputError
    from builder.installer import commit_signed, signed_by

    what = f"commit {commit[:12]} of {ref}"
    if not commit_signed(ctx.runner, repo, commit):
        if key is not None:
            raise InputError("command line", "--gpg-key", f"{what} is not signed, so devices "
                             "could not verify it", hint="sign the commit or drop --gpg-key")
        return None
    from builder.signing import SAMPLE_PUBLIC_KEY

    sample = ctx.path("gpg", SAMPLE_PUBLIC_KEY)
    candidate = key or (sample if sample.is_file() else None)
    if candidate is None:
        raise InputError("command line", "--gpg-key",
                         f"{what} is signed; devices need the public key to verify it",
                         hint="pass --gpg-key KEY.asc (gpg --export --armor KEYID)")
    if not signed_by(ctx.runner, repo, ref, candidate):
        raise InputError(str(candidate), "", f"this key does not verify the signature of {what}",
                         hint="pass the public half of the key the commit was signed with")
    if key is None:
        ctx.progress.info(f"{what} is signed with the SAMPLE key; devices get {candidate}")
    return candidate


def _local_commit(ctx: Context, repo: Path, ref: str) -> str | None:
    """The ref's commit in DIR/ostree/repo, when the image has been composed here."""
    if not (repo / "config").is_file():
        return None
    proc = ctx.runner.run(["ostree", f"--repo={repo}", "rev-parse", ref], check=False)
    return proc.stdout.decode().strip() if proc.returncode == 0 else None


def _read_text(path: Path, option: str) -> str:
    from builder.errors import InputError

    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(path), "", f"cannot read the file given to {option}: {exc}") \
            from exc
