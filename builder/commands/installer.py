"""`kickstart` and `installer`: the kickstart of an image, and its installer ISO
(DIR/installer/NAME.iso; NAME-ARCH.iso, one per architecture, for a release of several).

    python -m builder kickstart --image NAME --url http://server/repo [--pull-secret FILE]
    python -m builder kickstart --image NAME --embedded [--url http://server/repo]

    python -m builder installer --image NAME [--boot-iso rhel-9-boot.iso] [--url URL] ...

Takes the image's commit from DIR/ostree/repo and the `embedded` kickstart (same options as
`kickstart`). With --boot-iso the result boots Anaconda and installs unattended; without it,
it is a data ISO, whose kickstart mounts it by its volume id when a stock RHEL boot ISO is
booted with inst.ks=hd:LABEL=<volume id>:/ks.cfg.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder.commands.options import add_build_dir
from builder.context import Context
from builder.core.errors import InputError
from builder.release.ostree_config import DEFAULT_REF

if TYPE_CHECKING:  # the stage is imported when a command runs, keeping --help fast
    from builder.installer.media import MediaOptions


def register(sub: Any) -> None:
    kickstart = sub.add_parser(
        "kickstart", help="render and validate an image's kickstart (DIR/kickstart/)",
        description="Write DIR/kickstart/NAME-network.ks (install over the network from --url) "
                    "or, with --embedded, DIR/kickstart/NAME-embedded.ks (install from the "
                    "repo on the installer ISO).")
    add_build_dir(kickstart)
    add_media_options(kickstart)
    kickstart.add_argument("--embedded", action="store_true",
                           help="install from the ostree repo on the installer ISO; --url "
                                "then only names the update server")
    kickstart.add_argument("--container", metavar="REGISTRY/NS/NAME@DIGEST",
                           help="image mode: install the image's bootc container image "
                                "(ostreecontainer); DIR/kickstart/NAME-container.ks")
    kickstart.add_argument("--lookaside", metavar="URL",
                           help="image mode: where the image's signatures are published "
                                "(the devices' registries.d lookaside)")
    kickstart.set_defaults(func=cmd_kickstart)

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
    from builder.plan import image_targets

    if args.boot_iso is not None and len(ctx.release.architectures) > 1:
        raise InputError("command line", "--boot-iso",
                         "a boot ISO boots one architecture; the release builds "
                         f"{', '.join(ctx.release.architectures)}",
                         hint="add --arch ARCH, with that architecture's boot ISO")
    for target in image_targets(ctx, [args.image], args.ref):
        build_installer(ctx.for_arch(target.arch), target, media_options(args))
    return 0


def cmd_kickstart(ctx: Context, args: argparse.Namespace) -> int:
    from builder.installer.media import write_kickstart_file
    from builder.plan import image_targets

    variant = "container" if args.container else "embedded" if args.embedded else "network"
    for target in image_targets(ctx, [args.image], args.ref):
        write_kickstart_file(ctx.for_arch(target.arch), target, media_options(args), variant)
    return 0


def add_media_options(parser: argparse.ArgumentParser) -> None:
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


def media_options(args: argparse.Namespace) -> MediaOptions:
    from builder.installer.media import MediaOptions

    return MediaOptions(url=args.url, container=getattr(args, "container", None),
                        lookaside=getattr(args, "lookaside", None),
                        pull_secret=args.pull_secret, gpg_key=args.gpg_key,
                        ssh_key=args.ssh_key, microshift_config=args.microshift_config,
                        storage=args.storage, boot_iso=getattr(args, "boot_iso", None))
