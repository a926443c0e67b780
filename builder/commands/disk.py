"""`disk`: a raw and qcow2 disk image of an image's commit (Image Builder's edge-raw-image)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from builder.commands.options import add_build_dir
from builder.context import Context
from builder.core.errors import InputError


def register(sub: Any) -> None:
    disk = sub.add_parser(
        "disk", help="a bootable disk image (BUILD_DIR/disk/NAME.ARCH.raw and .qcow2; UEFI, "
                     "or BIOS with --firmware bios) of an image's commit on the SAMPLE "
                     "bootable base (needs root)")
    add_build_dir(disk)
    disk.add_argument("--image", required=True, metavar="NAME",
                      help="the image whose ref's head is deployed")
    disk.add_argument("--url", metavar="URL",
                      help="the ostree repo the device pulls updates from (http[s]://...; "
                           "default: none, set the remote later)")
    disk.add_argument("--gpg-key", type=Path, metavar="FILE",
                      help="ASCII-armored public key the commits are signed with (default: "
                           "the build's SAMPLE key when it signed them)")
    disk.add_argument("--no-qcow2", action="store_true", help="only the raw image")
    disk.add_argument("--firmware", choices=("uefi", "bios"), default="uefi",
                      help="uefi (default, as edge-raw-image): GPT with an EFI system "
                           "partition; bios (x86_64): MBR with GRUB's core image, written "
                           "as NAME.ARCH.bios.raw")
    disk.add_argument("--secure-boot", action="store_true",
                      help="uefi, x86_64: the commit's signed shim and GRUB on the EFI system "
                           "partition instead of GRUB made here, for firmware enforcing "
                           "Secure Boot with Microsoft's keys; written as "
                           "NAME.ARCH.secureboot.raw")
    disk.set_defaults(func=cmd_disk)


def cmd_disk(ctx: Context, args: argparse.Namespace) -> int:
    from builder.core.ostree import Repo
    from builder.disk.deployment import Deployment, console_karg
    from builder.disk.image import build_disk

    if args.url is not None and not args.url.startswith(("http://", "https://")):
        raise InputError("command line", "--url", f"{args.url!r} is not an http(s) URL")
    if args.gpg_key is not None and not args.gpg_key.is_file():
        raise InputError("command line", "--gpg-key", f"{args.gpg_key} does not exist")
    if args.secure_boot and args.firmware != "uefi":
        raise InputError("command line", "--secure-boot", "is for --firmware uefi")
    from builder.plan import image_targets

    for target in image_targets(ctx, [args.image]):
        arch, ref = target.arch, target.ref
        run = ctx.for_arch(arch)
        repo = Repo(run.layout.ostree_repo, run.runner)
        commit = repo.rev_parse(ref) if repo.exists() else None
        if commit is None:
            raise InputError("command line", "--image",
                             f"{repo.path} has no commit of {args.image} "
                             f"({ref})", hint="compose the image first")
        sample_key = run.layout.sample_public_key
        key = args.gpg_key or (sample_key if sample_key.is_file() else None)
        deployment = Deployment(repo.path, ref, commit, remote_url=args.url or "",
                                gpg_key=key, kargs=(console_karg(arch),))
        # The default firmware's image keeps the plain name; the other one's is apart.
        name = f"{args.image}.{arch}" + (".bios" if args.firmware == "bios" else "") + \
            (".secureboot" if args.secure_boot else "")
        firmware = args.firmware + (" Secure Boot" if args.secure_boot else "")
        with run.progress.step(f"{firmware} disk image of {args.image} ({arch}) = "
                               f"{commit[:12]}"):
            image = build_disk(run.runner, deployment, run.layout.disks, name,
                               epoch=run.release.source_date_epoch, qcow2=not args.no_qcow2,
                               firmware=args.firmware, arch=arch,
                               secure_boot=args.secure_boot)
            state = "written" if image.built else "unchanged"
            for path in (image.raw, image.qcow2, image.manifest):
                if path is not None:
                    run.progress.info(f"{state}: {path} ({path.stat().st_size} bytes)")
    return 0
