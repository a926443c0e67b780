"""`disk`: a raw and qcow2 disk image of an image's commit (Image Builder's edge-raw-image),
or with --from-image of the release's bootc image (builder/disk/from_image.py)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder.commands.options import add_build_dir
from builder.context import Context
from builder.core.errors import InputError

if TYPE_CHECKING:  # imported when the command runs, keeping --help fast
    from builder.disk.deployment import Deployment
    from builder.disk.from_image import ImageRequest


def register(sub: Any) -> None:
    disk = sub.add_parser(
        "disk", help="a bootable disk image (BUILD_DIR/disk/NAME.ARCH.raw and .qcow2; UEFI, "
                     "or BIOS with --firmware bios) of an image's commit on the SAMPLE "
                     "bootable base, or with --from-image of its bootc image (needs root)")
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
    _image_options(disk)
    disk.set_defaults(func=cmd_disk)


def _image_options(disk: Any) -> None:
    group = disk.add_argument_group(
        "image mode", "install the release's bootc image instead of the commit, as `bootc "
        "install` does; the device's /etc/containers/policy.json then accepts only the "
        "reference's images signed by the release key (--gpg-key, default the build's SAMPLE "
        "key)")
    group.add_argument("--from-image", nargs="?", const="", metavar="SOURCE",
                       help="no SOURCE: the build's bootc image of --image for the "
                            "architecture (`python -m builder bootc`, DIR/bootc/NAME/); "
                            "oci:PATH[:TAG]: an OCI layout; docker://HOST/NAME[:TAG|@DIGEST]: "
                            "pulled with skopeo. Written as NAME.ARCH.image.raw")
    group.add_argument("--reference", metavar="HOST/NAMESPACE/NAME[:TAG]",
                       help="the image the device follows (its origin; the policy accepts "
                            "this repository's signed images); default: the docker:// "
                            "SOURCE, or where `bootc --push` pushed the build's image")
    group.add_argument("--policy", type=Path, metavar="FILE",
                       help="containers-policy.json the docker:// pull must satisfy "
                            "(default: the host's /etc/containers/policy.json)")
    group.add_argument("--registries-d", type=Path, metavar="DIR",
                       help="registries.d for the pull: where the image's signatures are "
                            "read (its lookaside)")
    group.add_argument("--tls-verify", action=argparse.BooleanOptionalAction, default=True,
                       help="verify the registry's TLS certificate on the pull (default: yes)")
    group.add_argument("--lookaside", metavar="URL",
                       help="where the device reads the image's signatures "
                            "(/etc/containers/registries.d/microshift.yaml)")


def cmd_disk(ctx: Context, args: argparse.Namespace) -> int:
    from builder.core.ostree import Repo
    from builder.disk.deployment import Deployment, console_karg
    from builder.plan import image_targets

    _check_args(args)
    request = _image_request(args)
    for target in image_targets(ctx, [args.image]):
        arch, ref = target.arch, target.ref
        run = ctx.for_arch(arch)
        repo = Repo(run.layout.ostree_repo, run.runner)
        sample_key = run.layout.sample_public_key
        key = args.gpg_key or (sample_key if sample_key.is_file() else None)
        # The default firmware's image keeps the plain name; the other one's is apart.
        name = f"{args.image}.{arch}" + (".bios" if args.firmware == "bios" else "") + \
            (".secureboot" if args.secure_boot else "") + (".image" if request else "")
        if request is not None:
            _disk_from_image(run, args, request, name, ref=ref, key=key)
            continue
        commit = repo.rev_parse(ref) if repo.exists() else None
        if commit is None:
            raise InputError("command line", "--image",
                             f"{repo.path} has no commit of {args.image} "
                             f"({ref})", hint="compose the image first")
        deployment = Deployment(repo.path, ref, commit, remote_url=args.url or "",
                                gpg_key=key, kargs=(console_karg(arch),))
        _build(run, args, deployment, name, f"{commit[:12]}")
    return 0


def _check_args(args: argparse.Namespace) -> None:
    if args.url is not None and not args.url.startswith(("http://", "https://")):
        raise InputError("command line", "--url", f"{args.url!r} is not an http(s) URL")
    if args.gpg_key is not None and not args.gpg_key.is_file():
        raise InputError("command line", "--gpg-key", f"{args.gpg_key} does not exist")
    if args.secure_boot and args.firmware != "uefi":
        raise InputError("command line", "--secure-boot", "is for --firmware uefi")
    given = [(option, value) for option, value in (
        ("--reference", args.reference), ("--policy", args.policy),
        ("--registries-d", args.registries_d), ("--lookaside", args.lookaside),
        ("--no-tls-verify", None if args.tls_verify else False)) if value is not None]
    if args.from_image is None and given:
        raise InputError("command line", given[0][0], "belongs to --from-image; give it too")
    pulled = (args.from_image or "").startswith("docker://")
    for option, path, kind in (("--policy", args.policy, "file"),
                               ("--registries-d", args.registries_d, "directory")):
        if path is not None and not pulled:
            raise InputError("command line", option, "is for a pull: --from-image "
                             "docker://REFERENCE")
        if path is not None and not (path.is_file() if kind == "file" else path.is_dir()):
            raise InputError("command line", option, f"{path} is not a {kind}")
    if args.lookaside is not None and not args.lookaside.startswith(
            ("http://", "https://", "file://")):
        raise InputError("command line", "--lookaside", f"{args.lookaside!r} is not a URL; "
                         "allowed: http(s):// or file://")


def _image_request(args: argparse.Namespace) -> ImageRequest | None:
    if args.from_image is None:
        return None
    from builder.disk.from_image import check_reference, parse_source

    request = parse_source(args.from_image)
    if args.reference is not None:
        check_reference(args.reference, "--reference")
    return request


def _disk_from_image(run: Context, args: argparse.Namespace, request: ImageRequest,
                     name: str, *, ref: str, key: Path | None) -> None:
    """The disk installed from the image; a temporary layout of it beside the disks."""
    from builder.baseos.debian import BOOTC_STANDIN
    from builder.disk.deployment import Deployment, ImageSource, console_karg
    from builder.disk.from_image import PullOptions, choose_image, device_reference, image_etc

    arch = run.target_arch
    reference = device_reference(run, request, args.reference, args.image, arch)
    if key is None:
        raise InputError("command line", "--gpg-key", "is needed with --from-image: the "
                         "device's containers policy accepts only images signed by the "
                         "release key, and this build has no SAMPLE key")
    disks = run.layout.disks
    made = not disks.exists()
    disks.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix=f".{name}.source-", dir=disks) as work:
            chosen = choose_image(run, request, args.image, arch, Path(work),
                                  pulling=PullOptions(args.policy, args.registries_d,
                                                      args.tls_verify))
            deployment = Deployment(
                run.layout.ostree_repo, ref, chosen.commit, remote_url=args.url or "",
                gpg_key=key, kargs=(console_karg(arch),),
                etc_files=image_etc(reference, key, args.lookaside),
                image=ImageSource(chosen.layout, reference, chosen.manifest, BOOTC_STANDIN))
            _build(run, args, deployment, name, f"image {reference} {chosen.manifest[:19]}")
    finally:
        if made and not any(disks.iterdir()):
            disks.rmdir()


def _build(run: Context, args: argparse.Namespace, deployment: Deployment, name: str,
           what: str) -> None:
    from builder.disk.image import build_disk

    arch = run.target_arch
    firmware = args.firmware + (" Secure Boot" if args.secure_boot else "")
    with run.progress.step(f"{firmware} disk image of {args.image} ({arch}) = {what}"):
        image = build_disk(run.runner, deployment, run.layout.disks, name,
                           epoch=run.release.source_date_epoch, qcow2=not args.no_qcow2,
                           firmware=args.firmware, arch=arch, secure_boot=args.secure_boot)
        state = "written" if image.built else "unchanged"
        for path in (image.raw, image.qcow2, image.manifest):
            if path is not None:
                run.progress.info(f"{state}: {path} ({path.stat().st_size} bytes)")
