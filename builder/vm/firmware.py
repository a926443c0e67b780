"""The UEFI firmware a VM boots with: OVMF's code (AAVMF's on arm64), read-only and shared,
and a copy of its variable store per VM, kept beside the VM's disk.

The variables are the VM's NVRAM: the boot entries the firmware writes on the first boot
(it finds EFI/BOOT/BOOTX64.EFI on the disk and records it) are there at the next power-on,
as on a device, so every boot of a scenario after the first starts the way a device's does.

Secure Boot (x86_64): OVMF built with it (its variables guarded by SMM, so the machine is a
q35 with SMM and a secure flash, builder.vm.qemu) and a variable template with Microsoft's
keys enrolled and Secure Boot on, as a PC ships: it starts what Microsoft's UEFI CA signed
(shim) and refuses the rest. The VM's variables from that template are kept apart from the
plain ones beside the same disk.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import BuildError


@dataclass(frozen=True)
class Ovmf:
    code: Path
    vars_template: Path


# (code, variables) pairs that belong together (same flash size), per architecture:
# Debian's ovmf and qemu-efi-aarch64, Fedora's edk2-ovmf and edk2-aarch64. Without Secure
# Boot: the images' GRUB is not signed.
CANDIDATES: dict[str, tuple[tuple[str, str], ...]] = {
    "x86_64": (
        ("/usr/share/OVMF/OVMF_CODE_4M.fd", "/usr/share/OVMF/OVMF_VARS_4M.fd"),
        ("/usr/share/edk2/ovmf/OVMF_CODE.fd", "/usr/share/edk2/ovmf/OVMF_VARS.fd"),
        ("/usr/share/OVMF/OVMF_CODE.fd", "/usr/share/OVMF/OVMF_VARS.fd"),
    ),
    "aarch64": (
        ("/usr/share/AAVMF/AAVMF_CODE.fd", "/usr/share/AAVMF/AAVMF_VARS.fd"),
        ("/usr/share/edk2/aarch64/QEMU_EFI-pflash.raw",
         "/usr/share/edk2/aarch64/vars-template-pflash.raw"),
    ),
}
# With Secure Boot: Debian's ovmf (OVMF_VARS_4M.ms.fd: Microsoft's KEK and db, Secure Boot
# on) and Fedora's edk2-ovmf (OVMF_VARS.secboot.fd: the same keys).
SECURE_BOOT: dict[str, tuple[tuple[str, str], ...]] = {
    "x86_64": (
        ("/usr/share/OVMF/OVMF_CODE_4M.secboot.fd", "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"),
        ("/usr/share/edk2/ovmf/OVMF_CODE.secboot.fd",
         "/usr/share/edk2/ovmf/OVMF_VARS.secboot.fd"),
    ),
}
PACKAGES = {"x86_64": "ovmf, or edk2-ovmf on Fedora",
            "aarch64": "qemu-efi-aarch64, or edk2-aarch64 on Fedora"}


def find_ovmf(arch: str = "x86_64", secure_boot: bool = False) -> Ovmf:
    candidates = (SECURE_BOOT if secure_boot else CANDIDATES).get(arch, ())
    for code, variables in candidates:
        if Path(code).is_file() and Path(variables).is_file():
            return Ovmf(Path(code), Path(variables))
    raise BuildError(f"no UEFI firmware{' with Secure Boot' if secure_boot else ''} for "
                     f"{arch} VMs (looked for "
                     + (", ".join(code for code, _ in candidates) or "none known") + ")",
                     hint=f"install {PACKAGES.get(arch, 'an EDK2 build')} "
                          "(ci/install-host-tools.sh does); or boot x86_64's BIOS image "
                          "(--firmware bios)")


def vars_path(disk: Path, secure_boot: bool = False) -> Path:
    """Where the VM of `disk` keeps its firmware variables."""
    return disk.with_name(disk.name + (".secboot-efivars.fd" if secure_boot else ".efivars.fd"))


def ensure_vars(disk: Path, arch: str = "x86_64", secure_boot: bool = False) -> Path:
    """The VM's variable store, a fresh copy of the firmware's template the first time."""
    path = vars_path(disk, secure_boot)
    if not path.is_file():
        partial = path.with_name(path.name + ".tmp")
        shutil.copyfile(find_ovmf(arch, secure_boot).vars_template, partial)
        partial.replace(path)
    return path


def pflash_options(variables: Path, arch: str = "x86_64",
                   secure_boot: bool = False) -> list[str]:
    """QEMU's two flash chips: the firmware's code (read-only), then its variables."""
    code = find_ovmf(arch, secure_boot).code
    for path in (code, variables):
        if "," in str(path):
            raise BuildError(f"{path} has a comma, which QEMU's option syntax cannot carry")
    return ["-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={code}",
            "-drive", f"if=pflash,format=raw,unit=1,file={variables}"]
