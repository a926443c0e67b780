"""GRUB for BIOS machines, written into a disk image file without a loop device.

What `grub-bios-setup` does for an MBR disk (GRUB's util/setup.c), for a core image embedded
right after the MBR: boot.img's code goes into sector 0, keeping the disk signature and the
partition table, with the jump that trusts the BIOS's boot drive turned into NOPs (as setup
does for hard disks); core.img goes into sectors 1.. (grub-mkimage already writes the length
of the blocklist that boot.img's next stage, diskboot, reads, and boot.img already points at
sector 1). The core image carries its modules and a prefix naming the boot partition, where
grub.cfg and grubenv live.
"""

from __future__ import annotations

from pathlib import Path

from builder.core.errors import BuildError
from builder.core.runner import Runner, find_tool

PLATFORM_DIR = Path("/usr/lib/grub/i386-pc")
# What the generated grub.cfg uses: the boot partition's ext4, the environment block for
# greenboot's counter, the serial console, linux.
MODULES = ("biosdisk", "part_msdos", "ext2", "normal", "linux", "configfile", "echo", "test",
           "loadenv", "serial", "terminal", "search", "search_fs_uuid")
CODE_END = 440           # boot.img's code; then the disk signature and the partition table
DRIVE_CHECK = 0x66       # GRUB_BOOT_MACHINE_DRIVE_CHECK: a 2-byte jump
KERNEL_SECTOR = 0x5C     # GRUB_BOOT_MACHINE_KERNEL_SECTOR: where core.img starts (LBA)
SECTOR = 512


def make_core_image(runner: Runner, out: Path, prefix: str) -> bytes:
    """grub-mkimage's i386-pc core image with MODULES and `prefix` (e.g. (hd0,msdos1)/grub2)."""
    if not (PLATFORM_DIR / "boot.img").is_file():
        raise BuildError(f"GRUB's i386-pc modules are not installed ({PLATFORM_DIR})",
                         hint="install grub-pc-bin, or grub2-pc-modules on Fedora "
                              "(ci/install-host-tools.sh does)")
    # Debian names it grub-mkimage, Fedora grub2-mkimage.
    tool = find_tool("grub-mkimage") or find_tool("grub2-mkimage") or "grub-mkimage"
    runner.run([tool, "--format=i386-pc", f"--directory={PLATFORM_DIR}",
                f"--prefix={prefix}", f"--output={out}", *MODULES])
    return out.read_bytes()


def install_bios_boot(disk: Path, core: bytes, first_partition_sector: int) -> None:
    """Write boot.img into the MBR and core.img after it, before the first partition."""
    boot = (PLATFORM_DIR / "boot.img").read_bytes()
    if len(boot) != SECTOR or int.from_bytes(boot[KERNEL_SECTOR:KERNEL_SECTOR + 8],
                                             "little") != 1:
        raise BuildError(f"{PLATFORM_DIR / 'boot.img'} is not GRUB's i386-pc boot sector "
                         "(it must start the core image at sector 1)")
    if SECTOR + len(core) > first_partition_sector * SECTOR:
        raise BuildError(f"GRUB's core image ({len(core)} bytes) does not fit before the first "
                         f"partition (sector {first_partition_sector})")
    with disk.open("r+b") as handle:
        mbr = bytearray(handle.read(SECTOR))
        if mbr[510:512] != b"\x55\xaa":
            raise BuildError(f"{disk} has no MBR partition table to install GRUB beside")
        mbr[:CODE_END] = boot[:CODE_END]
        mbr[DRIVE_CHECK:DRIVE_CHECK + 2] = b"\x90\x90"
        handle.seek(0)
        handle.write(mbr)
        handle.write(core)
