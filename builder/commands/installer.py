"""`installer`: the installer ISO of an image (DIR/installer/NAME.iso).

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

from builder.context import Context


def register(sub: Any) -> None:
    from builder.cli import add_build_dir
    from builder.commands.kickstart import add_kickstart_options

    parser = sub.add_parser(
        "installer", help="build an image's installer ISO (DIR/installer/NAME.iso)",
        description="Put the image's ostree commit, its embedded kickstart and a manifest on "
                    "an ISO; with --boot-iso, inject them into a RHEL boot ISO with inst.ks= "
                    "on every boot entry, as lorax's mkksiso does.")
    add_build_dir(parser)
    add_kickstart_options(parser)
    parser.add_argument("--boot-iso", type=Path, metavar="PATH",
                        help="RHEL 9 boot ISO to make an unattended installer from")
    parser.set_defaults(func=cmd_installer)


def cmd_installer(ctx: Context, args: argparse.Namespace) -> int:
    from builder.commands.kickstart import kickstart_context
    from builder.installer import IsoRequest, build_installer_iso, resolve_commit, volume_id_for
    from builder.kickstart import DATA_MEDIA_URL, render

    repo = ctx.path("ostree", "repo")
    with ctx.progress.step(f"installer {args.image}"):
        ks = kickstart_context(ctx, args, "embedded")
        if args.boot_iso is None:
            # A data ISO does not boot: the kickstart mounts it by label beside a boot ISO.
            ks = replace(ks, install_url=DATA_MEDIA_URL, media_label=volume_id_for(args.image))
        resolve_commit(ctx.runner, repo, ks.ref, args.image)
        text = render("embedded", ks)
        request = IsoRequest(
            image=args.image, ref=ks.ref, source_repo=repo, kickstart=text,
            kickstart_private=ks.pull_secret is not None,
            output=ctx.path("installer", f"{args.image}.iso"),
            source_date_epoch=ctx.release.source_date_epoch,
            boot_iso=args.boot_iso.resolve() if args.boot_iso else None)
        manifest = build_installer_iso(ctx.runner, ctx.progress, request)
        ctx.progress.info(f"commit {manifest.commit} ({manifest.ref}"
                          f"{', version ' + manifest.version if manifest.version else ''}), "
                          f"volume id {manifest.volume_id}")
        if manifest.boot_iso is None:
            ctx.progress.info(
                "this is a DATA ISO (ostree repo, kickstart, manifest) and does not boot: "
                "attach it beside a RHEL 9 boot ISO and boot that with "
                f"inst.ks=hd:LABEL={manifest.volume_id}:/{manifest.kickstart}, or pass "
                "--boot-iso RHEL-9-BOOT.iso for one unattended installer")
        else:
            ctx.progress.info(f"boots {manifest.boot_iso['file']}'s installer with "
                              f"inst.ks=hd:LABEL={manifest.volume_id}:/{manifest.kickstart}")
    return 0
