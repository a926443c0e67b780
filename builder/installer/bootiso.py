"""Reading ISO images with xorriso, and turning a RHEL boot ISO into an unattended installer.

The boot ISO is changed the way lorax's mkksiso does it: extract the boot configurations,
append `inst.ks=hd:LABEL=<volume id>:/<kickstart>` to every kernel command line (isolinux
`append` lines, GRUB `linux`/`linuxefi` lines), then let xorriso rebuild the image from the
original with `-boot_image any replay` (keeping its El Torito and EFI boot records),
`-update` for the edited configurations and `-map` for the added files, and re-implant the
media checksum that the "Test this media" boot entry (rd.live.check) verifies.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import BuildError
from builder.core.runner import Runner

C_LOCALE = {"LANG": "C", "LC_ALL": "C"}
ISOLINUX_CFG = "isolinux/isolinux.cfg"
GRUB_CFGS = ("EFI/BOOT/grub.cfg", "EFI/BOOT/BOOT.conf", "boot/grub2/grub.cfg",
             "boot/grub/grub.cfg")
# What makes an ISO an Anaconda installer: the tree description and the installer image.
INSTALLER_MARKERS = (".treeinfo", "images/install.img")
# udev's allowed label characters (libudev-util.c is_whitelisted): others are \xNN-escaped.
UDEV_SAFE = re.compile(r"[a-zA-Z0-9#+.:=@_-]")


@dataclass(frozen=True)
class IsoListing:
    path: Path
    volume_id: str
    files: frozenset[str]  # paths relative to the ISO root, no leading '/'

    def has(self, name: str) -> bool:
        return name in self.files


def list_iso(runner: Runner, iso: Path) -> IsoListing:
    """Volume id and file list of an ISO image (xorriso -find, as mkksiso reads it)."""
    proc = runner.run(["xorriso", "-indev", str(iso), "-pkt_output", "on", "-find", "/",
                       "-type", "f"], env=C_LOCALE)
    volid = ""
    for line in proc.stderr.decode(errors="replace").splitlines():
        if line.startswith("Volume id"):
            volid = _unquote(line.split(":", 1)[1]) if ":" in line else ""
    files = set()
    for line in proc.stdout.decode(errors="replace").splitlines():
        if line.startswith("R:1: "):
            files.add(_unquote(line[5:]).lstrip("/"))
    return IsoListing(iso, volid, frozenset(files))


def _unquote(text: str) -> str:
    """One word of xorriso's report, which quotes it in shell style; a name with a control
    character or a stray quote (from the ISO, not ours to trust) is kept as it is printed."""
    try:
        words = shlex.split(text)
    except ValueError:
        words = []
    return words[0] if words else text.strip().strip("'")


def extract(runner: Runner, iso: Path, pairs: list[tuple[str, Path]]) -> None:
    """Copy files or directory trees out of an ISO: (path on the ISO, destination)."""
    argv = ["xorriso", "-osirrox", "on", "-indev", str(iso)]
    for inside, dest in pairs:
        dest.parent.mkdir(parents=True, exist_ok=True)
        argv += ["-extract", "/" + inside.lstrip("/"), str(dest)]
    runner.run(argv, env=C_LOCALE)


def boot_images(runner: Runner, iso: Path) -> list[str]:
    """The El Torito boot images of an ISO, as "PLATFORM PATH" (e.g. "UEFI /images/efiboot.img")."""
    out = runner.run(["xorriso", "-indev", str(iso), "-report_el_torito", "plain"],
                     env=C_LOCALE).stdout.decode(errors="replace")
    platforms: dict[str, str] = {}
    paths: dict[str, str] = {}
    for line in out.splitlines():
        key, _, value = line.partition(":")
        fields = value.split()
        if key.strip() == "El Torito boot img" and len(fields) >= 2:
            platforms[fields[0]] = fields[1]
        elif key.strip() == "El Torito img path" and len(fields) >= 2:
            paths[fields[0]] = fields[1]
    return [f"{platforms[n]} {paths.get(n, '?')}" for n in sorted(platforms)]


def inspect_boot_iso(runner: Runner, iso: Path) -> IsoListing:
    """The listing of a RHEL boot ISO; a clear error when the file is not an installer ISO."""
    if not iso.is_file():
        raise BuildError(f"{iso}: boot ISO not found",
                         hint="pass the RHEL 9 boot ISO (rhel-9.x-x86_64-boot.iso) with --boot-iso")
    try:
        listing = list_iso(runner, iso)
    except BuildError as exc:
        raise BuildError(f"{iso}: not a readable ISO image",
                         hint="pass the RHEL 9 boot ISO with --boot-iso") from exc
    if not listing.files:
        # xorriso treats a file without an ISO 9660 volume as a blank image, not an error.
        raise BuildError(f"{iso}: not a readable ISO image (no ISO 9660 file system)",
                         hint="pass the RHEL 9 boot ISO with --boot-iso")
    missing = [m for m in INSTALLER_MARKERS if not listing.has(m)]
    if not listing.has(ISOLINUX_CFG) and not any(listing.has(c) for c in GRUB_CFGS):
        missing.append(f"{ISOLINUX_CFG} or {GRUB_CFGS[0]}")
    if missing:
        raise BuildError(f"{iso}: not an installer ISO (missing {', '.join(missing)})",
                         hint="pass a RHEL 9 boot or DVD ISO, which boots Anaconda")
    if not listing.volume_id:
        raise BuildError(f"{iso}: the ISO has no volume id, which the boot entries need")
    return listing


def udev_escape(label: str) -> str:
    return "".join(ch if UDEV_SAFE.match(ch) else f"\\x{ord(ch):02x}" for ch in label)


def kernel_args(volume_id: str, kickstart: str, extra: tuple[str, ...] = ()) -> str:
    return " ".join((f"inst.ks=hd:LABEL={udev_escape(volume_id)}:/{kickstart}", *extra))


def _append_args(line: str, args: str) -> str:
    # Drop an inst.ks= left by an earlier run, so that re-injecting replaces it.
    kept = [word for word in line.rstrip("\n").split(" ")
            if not word.startswith(("inst.ks=", "inst.nosave="))]
    return " ".join(kept).rstrip() + " " + args


def edit_isolinux(text: str, args: str) -> str:
    return "".join(_append_args(line, args) + "\n" if line.strip().startswith("append")
                   else line for line in text.splitlines(keepends=True))


def edit_grub(text: str, args: str) -> str:
    # `linux` on BIOS and aarch64, `linuxefi` on x86_64 EFI; neither matches `initrd...`.
    return "".join(_append_args(line, args) + "\n" if line.strip().startswith("linux")
                   else line for line in text.splitlines(keepends=True))


def boot_configs(listing: IsoListing) -> list[str]:
    return [c for c in (ISOLINUX_CFG, *GRUB_CFGS) if listing.has(c)]


def patch_boot_configs(runner: Runner, listing: IsoListing, workdir: Path,
                       args: str) -> dict[str, Path]:
    """Extract the boot configurations and add `args` to their kernel lines.

    Returns {path on the ISO: edited file}. Every configuration that boots a kernel must
    gain the arguments, or booting that entry would start an interactive install.
    """
    configs = boot_configs(listing)
    extract(runner, listing.path, [(c, workdir / c) for c in configs])
    edited: dict[str, Path] = {}
    for config in configs:
        path = workdir / config
        text = path.read_text()
        new = edit_isolinux(text, args) if config == ISOLINUX_CFG else edit_grub(text, args)
        if new == text:
            raise BuildError(f"{listing.path}: {config} has no kernel command line to add "
                             "inst.ks= to", hint="is this a RHEL installer ISO?")
        path.write_text(new)
        edited[config] = path
    return edited


def replay_argv(boot_iso: Path, output: Path, updates: dict[str, Path],
                maps: dict[str, Path]) -> list[str]:
    """xorriso: the boot ISO with its boot records replayed, configs updated, files added."""
    argv = ["xorriso", "-indev", str(boot_iso), "-outdev", str(output),
            "-boot_image", "any", "replay"]
    for inside, path in sorted(updates.items()):
        argv += ["-update", str(path), "/" + inside]
    for inside, path in sorted(maps.items()):
        argv += ["-map", str(path), "/" + inside]
    return argv


def data_iso_argv(output: Path, volume_id: str, maps: dict[str, Path]) -> list[str]:
    argv = ["xorriso", "-outdev", str(output), "-volid", volume_id]
    for inside, path in sorted(maps.items()):
        argv += ["-map", str(path), "/" + inside]
    return argv
