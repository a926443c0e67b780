"""GRUB for UEFI machines and the EFI system partition it is on, made without a mount.

The firmware (OVMF, AAVMF, a device's) starts the removable-media path EFI/BOOT/BOOTX64.EFI
(BOOTAA64.EFI on arm64) when its variables name no boot entry, as on a new disk. That file is
a GRUB image from grub-mkimage carrying the same modules as the BIOS core image and a small
embedded config: it finds the boot partition by its file system UUID and sets the prefix to
its /grub2, where the same grub.cfg and grubenv as under BIOS are, so boot counting does not
depend on the firmware. GRUB's modules are the image's own when its commit carries them
(/usr/lib/grub/FORMAT, as Image Builder takes the boot loader from the image's packages:
how an arm64 image gets arm64 GRUB on an x86_64 build host), else the build host's. The FAT
file system is made by mkfs.vfat with a fixed volume ID and
`--invariant` (no time, no random serial) and filled by mtools' mcopy, keeping the files'
clamped times: the same inputs give the same bytes.

With Secure Boot (x86_64), the ESP holds no GRUB made here (no key a firmware trusts signs
it) but the commit's own signed chain, as Image Builder puts the image's shim-x64 and
grub2-efi-x64 there: Debian's shim (signed by Microsoft's UEFI CA) as BOOTX64.EFI, Debian's
signed GRUB beside it as grubx64.efi (shim loads it from its own directory and checks it
against Debian's CA built into shim), MokManager (mmx64.efi, which shim starts when a
check fails). Signed GRUB is a monolithic image whose prefix is /EFI/debian: a grub.cfg
there finds /boot by UUID and reads the same grub.cfg and grubenv as the unsigned image,
as RHEL's /EFI/redhat/grub.cfg does. shim's fallback (fbx64.efi) is left out: on a disk
whose firmware variables name no boot entry it would write one and reset the machine,
a boot that is no device's.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import BuildError
from builder.core.runner import Runner, find_tool
from builder.disk.grub import MODULES as BIOS_MODULES

GRUB_LIB = Path("/usr/lib/grub")


@dataclass(frozen=True)
class EfiPlatform:
    arch: str
    grub_format: str        # grub-mkimage --format, also the modules' directory name
    boot_file: str          # the removable-media path's file name
    debian: str             # the packages with the modules
    fedora: str

    @property
    def directory(self) -> Path:
        return GRUB_LIB / self.grub_format

    def modules_in(self, tree: Path | None) -> Path:
        """The commit's GRUB modules if the deployed `tree` has them, else the host's."""
        own = tree / "usr/lib/grub" / self.grub_format if tree is not None else None
        return own if own is not None and (own / "kernel.img").is_file() else self.directory


PLATFORMS = {p.arch: p for p in (
    EfiPlatform("x86_64", "x86_64-efi", "BOOTX64.EFI", "grub-efi-amd64-bin",
                "grub2-efi-x64-modules"),
    EfiPlatform("aarch64", "arm64-efi", "BOOTAA64.EFI", "grub-efi-arm64-bin",
                "grub2-efi-aa64-modules"),
)}
# BIOS's modules without its disk and MBR drivers (EFI's disks come through the firmware's
# block I/O, built into the EFI kernel); the ESP's FAT for finding nothing else there.
MODULES = (*(m for m in BIOS_MODULES if m not in ("biosdisk", "part_msdos")),
           "part_gpt", "fat")


# Debian's signed chain as the commit carries it (shim-signed, shim-helpers-amd64-signed,
# grub-efi-amd64-signed), each file's place under the ESP's EFI/BOOT.
SIGNED_CHAIN = {"x86_64": (("usr/lib/shim/shimx64.efi.signed", "BOOTX64.EFI"),
                           ("usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed", "grubx64.efi"),
                           ("usr/lib/shim/mmx64.efi.signed", "mmx64.efi"))}
SIGNED_PREFIX = "debian"    # signed GRUB's prefix, /EFI/debian, built into the image


def platform(arch: str) -> EfiPlatform:
    found = PLATFORMS.get(arch)
    if found is None:
        raise BuildError(f"no UEFI GRUB platform for {arch}",
                         hint=f"UEFI disk images are made for {', '.join(PLATFORMS)}")
    return found


def embedded_config(boot_uuid: str) -> str:
    """Run before GRUB's normal mode, which then reads $prefix/grub.cfg. The rescue parser
    runs it (normal mode is not loaded yet): one command a line, no `if`. A missing boot
    partition shows as search's own error, then GRUB's prompt."""
    return (f"search --no-floppy --fs-uuid --set=root {boot_uuid}\n"
            "set prefix=($root)/grub2\n")


def chain_config(boot_uuid: str) -> str:
    """Signed GRUB's grub.cfg on the ESP, read in normal mode: /boot's grub.cfg, with the
    prefix (where grubenv is) on /boot too. `root` and `prefix` are exported by GRUB, so
    configfile's new context keeps them."""
    return (f"search --no-floppy --fs-uuid --set=root {boot_uuid}\n"
            "set prefix=($root)/grub2\n"
            "configfile $prefix/grub.cfg\n")


def make_efi_image(runner: Runner, arch: str, out: Path, boot_uuid: str,
                   tree: Path | None = None) -> Path:
    """grub-mkimage's EFI application for `arch`, finding /boot by `boot_uuid`, made of the
    deployed `tree`'s GRUB modules or the host's."""
    plat = platform(arch)
    directory = plat.modules_in(tree)
    if not (directory / "kernel.img").is_file():
        raise BuildError(f"GRUB's {plat.grub_format} modules are neither in the commit nor "
                         f"installed here ({plat.directory})",
                         hint=f"install {plat.debian}, or {plat.fedora} on Fedora "
                              "(ci/install-host-tools.sh does; Debian packages "
                              "grub-efi-arm64-bin for arm64 hosts only: put it in the arm64 "
                              "commit)")
    config = out.with_name(out.name + ".cfg")
    config.write_text(embedded_config(boot_uuid))
    tool = find_tool("grub-mkimage") or find_tool("grub2-mkimage") or "grub-mkimage"
    # The prefix is set by the embedded config; grub-mkimage wants one given all the same.
    runner.run([tool, f"--format={plat.grub_format}", f"--directory={directory}",
                "--prefix=", f"--config={config}", f"--output={out}", *MODULES])
    config.unlink()
    return out


def make_esp(runner: Runner, image: Path, size: int, *, tree: Path, volume_id: str,
             epoch: int) -> None:
    """A FAT32 file system of `size` bytes in `image` holding the directory `tree`."""
    for tool, package in (("mkfs.vfat", "dosfstools"), ("mcopy", "mtools")):
        if find_tool(tool) is None:
            raise BuildError(f"required host tool '{tool}' is not installed (the EFI system "
                             "partition is made with it)",
                             hint=f"install {package} (ci/install-host-tools.sh does)")
    with image.open("wb") as handle:
        handle.truncate(size)
    # --invariant first: it also sets a fixed volume ID, which -i then replaces.
    runner.run(["mkfs.vfat", "-F", "32", "-n", "EFI-SYSTEM", "--invariant", "-i", volume_id,
                str(image)])
    for path in (tree, *tree.rglob("*")):
        os.utime(path, (epoch, epoch), follow_symlinks=False)
    # mcopy -m keeps each file's (clamped) time; directories take their source's too.
    runner.run(["mcopy", "-s", "-m", "-i", str(image), *map(str, sorted(tree.iterdir())),
                "::/"], env={"MTOOLS_SKIP_CHECK": "1", "SOURCE_DATE_EPOCH": str(epoch)})


def esp_tree(runner: Runner, arch: str, work: Path, boot_uuid: str,
             deployed: Path | None = None, *, secure_boot: bool = False) -> Path:
    """WORK/esp: EFI/BOOT/BOOT<ARCH>.EFI, GRUB made here; with `secure_boot`, the deployed
    commit's signed shim and GRUB, and EFI/debian/grub.cfg."""
    boot = work / "esp" / "EFI" / "BOOT"
    boot.mkdir(parents=True)
    if not secure_boot:
        make_efi_image(runner, arch, boot / platform(arch).boot_file, boot_uuid, deployed)
        return work / "esp"
    chain = SIGNED_CHAIN.get(arch)
    if chain is None:
        raise BuildError(f"no signed boot chain for {arch}",
                         hint=f"Secure Boot disk images are made for {', '.join(SIGNED_CHAIN)}")
    for source, name in chain:
        path = deployed / source if deployed is not None else None
        if path is None or not path.is_file():
            raise BuildError(f"the commit has no /{source}: a Secure Boot disk image is made "
                             "of the commit's own signed shim and GRUB",
                             hint="rebuild the SAMPLE bootable base (baseos/packages.txt "
                                  "installs shim-signed and grub-efi-amd64-signed), or drop "
                                  "--secure-boot")
        shutil.copyfile(path, boot / name)
    prefix = work / "esp" / "EFI" / SIGNED_PREFIX
    prefix.mkdir()
    (prefix / "grub.cfg").write_text(chain_config(boot_uuid))
    return work / "esp"
