"""Where the partitions of a disk image are, for each firmware the image boots with.

BIOS: an MBR, GRUB's core image in the gap before the first partition, /boot and the root.
UEFI (the default, as Image Builder's edge-raw-image): a GPT whose first partition is the EFI
system partition holding GRUB's EFI image, then /boot and the root at the same sizes. Both
put grub.cfg and grubenv on /boot, so GRUB counts boots the same way under either firmware.
The GPT's disk and partition GUIDs are derived from the image's identity, as the file
systems' UUIDs are, so the same inputs write the same table.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from builder.core.diskspace import MiB
from builder.core.errors import BuildError

FIRMWARES = ("uefi", "bios")
DEFAULT_FIRMWARE = "uefi"
SECTOR = 512
FIRST_SECTOR = 2048         # the first partition starts at 1 MiB (BIOS: GRUB's core image before)
BOOT_SIZE = 384 * MiB
# Image Builder's edge-raw-image gives the ESP 200 MiB; FAT32 (as the UEFI spec asks) needs
# at least 65525 clusters, which 200 MiB of 2 KiB clusters has.
ESP_SIZE = 200 * MiB
# The GPT's backup header and entries at the disk's end: 33 sectors, rounded to 1 MiB.
GPT_TAIL = 1 * MiB
NAMESPACE = uuid.UUID("5e0f2a43-6c38-4bb4-9d58-6b1c8f1d2e77")
# GPT partition types: the EFI system partition, Linux file system data.
ESP_TYPE = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
LINUX_TYPE = "0FC63DAF-8483-4772-8E79-3D69D8477DE4"


@dataclass(frozen=True)
class Layout:
    firmware: str

    def __post_init__(self) -> None:
        if self.firmware not in FIRMWARES:
            raise BuildError(f"no disk layout for firmware {self.firmware!r}",
                             hint=f"one of: {', '.join(FIRMWARES)}")

    @property
    def esp_size(self) -> int:
        return ESP_SIZE if self.firmware == "uefi" else 0

    @property
    def boot_offset(self) -> int:
        return FIRST_SECTOR * SECTOR + self.esp_size

    @property
    def root_offset(self) -> int:
        return self.boot_offset + BOOT_SIZE

    def disk_size(self, root_size: int) -> int:
        return self.root_offset + root_size + (GPT_TAIL if self.firmware == "uefi" else 0)

    def table(self, identity: str, root_size: int) -> str:
        """The sfdisk script of the partition table."""
        boot, root = self.boot_offset // SECTOR, self.root_offset // SECTOR
        if self.firmware == "bios":
            return (f"label: dos\nlabel-id: 0x{identity[:8]}\n"
                    f"start={boot}, size={BOOT_SIZE // SECTOR}, type=83, bootable\n"
                    f"start={root}, size={root_size // SECTOR}, type=83\n")
        guid = {part: str(uuid.uuid5(NAMESPACE, f"{identity}:gpt:{part}")).upper()
                for part in ("disk", "esp", "boot", "root")}
        return (f"label: gpt\nlabel-id: {guid['disk']}\nfirst-lba: {FIRST_SECTOR}\n"
                f"start={FIRST_SECTOR}, size={ESP_SIZE // SECTOR}, type={ESP_TYPE}, "
                f"uuid={guid['esp']}, name=\"EFI System Partition\"\n"
                f"start={boot}, size={BOOT_SIZE // SECTOR}, type={LINUX_TYPE}, "
                f"uuid={guid['boot']}, name=\"boot\"\n"
                f"start={root}, size={root_size // SECTOR}, type={LINUX_TYPE}, "
                f"uuid={guid['root']}, name=\"root\"\n")


def esp_volume_id(identity: str) -> str:
    """The FAT volume ID (8 hex digits) of the image's ESP."""
    return uuid.uuid5(NAMESPACE, f"{identity}:esp").hex[:8]
