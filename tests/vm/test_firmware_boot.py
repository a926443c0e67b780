"""Each firmware boots the pipeline's disk image into GRUB's menu on the boot partition: OVMF
and SeaBIOS on x86_64, AAVMF on arm64 (GRUB's arm64 modules carried by the commit, as an
arm64 image's own packages would carry them). The kernel is a stand-in: what is proved is
firmware -> GRUB -> /boot's grub.cfg and grubenv, the path boot counting takes; the VM
scenarios (test_vm_scenarios.py) boot the real base. With Secure Boot enforced (OVMF with
Microsoft's keys), Debian's signed shim, GRUB and kernel boot as far as the kernel's lockdown,
and the GRUB made here is refused by the firmware. VM tier only (MSEB_VM=1)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from builder.core.runner import Runner
from builder.disk.deployment import Deployment
from builder.disk.efi import SIGNED_CHAIN
from builder.disk.image import build_disk
from builder.disk.layout import ESP_SIZE
from builder.vm.qemu import Machine, power_on
from tests.disk.test_image import EPOCH, KVER, REF, small_commit
from tests.disk.test_uefi_image import esp_file
from tests.support import requires

pytestmark = [pytest.mark.integration,
              requires.root_only("the deployed files keep their owners")]
MENU_LINE = "grub: entry 0 boot_counter="


def boot_to_grub(machine: Machine, work: Path, seconds: float = 240) -> float:
    """Seconds from QEMU's start to the menu's first line on the console."""
    with power_on(machine, work / "serial.log", work / "qmp.sock") as boot:
        while boot.running() and boot.seconds() < seconds:
            if any(MENU_LINE in line for line in boot.lines()):
                return boot.seconds()
            time.sleep(0.5)
    log = (work / "serial.log").read_text(errors="replace")
    raise AssertionError(f"no GRUB menu within {seconds}s:\n{log[-2000:]}")


@pytest.mark.parametrize("firmware", ["uefi", "bios"])
def test_an_x86_64_image_boots_into_grub_s_menu_on_boot(tmp_path: Path, firmware: str) -> None:
    repo, commit = small_commit(tmp_path)
    image = build_disk(Runner(), Deployment(repo.path, REF, commit), tmp_path / "out", "t",
                       epoch=EPOCH, qcow2=False, firmware=firmware)
    seconds = boot_to_grub(Machine(image.raw, snapshot=True, firmware=firmware), tmp_path)
    print(f"{firmware}: GRUB's menu {seconds:.1f}s after QEMU's start")


@pytest.fixture(scope="module")
def arm64_grub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Debian's grub-efi-arm64-bin, unpacked (it is packaged for arm64 hosts only)."""
    root = tmp_path_factory.mktemp("arm64-grub") / "root"
    subprocess.run(["mmdebstrap", "--quiet", "--variant=extract", "--architectures=arm64",
                    "--include=grub-efi-arm64-bin", "bookworm", str(root)], check=True,
                   capture_output=True, timeout=600)
    return root / "usr/lib/grub/arm64-efi"


def test_an_arm64_image_carries_its_own_grub_and_aavmf_boots_it_into_grub_s_menu(
        tmp_path: Path, arm64_grub: Path) -> None:
    repo, commit = small_commit(tmp_path, grub=arm64_grub)
    deployment = Deployment(repo.path, REF, commit, kargs=("console=ttyAMA0,115200",))
    images = [build_disk(Runner(), deployment, tmp_path / out, "t.aarch64", epoch=EPOCH,
                         qcow2=False, arch="aarch64") for out in ("a", "b")]
    assert images[0].raw.read_bytes() == images[1].raw.read_bytes()
    esp = tmp_path / "esp.vfat"
    subprocess.run(["dd", f"if={images[0].raw}", f"of={esp}", "bs=1M", "skip=1",
                    f"count={ESP_SIZE >> 20}", "status=none"], check=True)
    subprocess.run(["fsck.vfat", "-n", str(esp)], check=True, capture_output=True)
    grub = esp_file(images[0].raw, 1 << 20, "/EFI/BOOT/BOOTAA64.EFI", tmp_path / "grub.efi")
    pe = int.from_bytes(grub[0x3C:0x40], "little")
    assert grub[pe:pe + 4] == b"PE\0\0" and grub[pe + 4:pe + 6] == b"\x64\xaa"  # arm64
    machine = Machine(images[0].raw, snapshot=True, firmware="uefi", arch="aarch64")
    seconds = boot_to_grub(machine, tmp_path, seconds=600)
    print(f"aarch64 uefi: GRUB's menu {seconds:.1f}s after QEMU's start")


@pytest.fixture(scope="module")
def debian_signed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Debian's signed shim, GRUB and kernel, unpacked: the files the bootable base's commit
    carries (baseos/packages.txt), at their places in a commit's tree."""
    root = tmp_path_factory.mktemp("signed") / "root"
    subprocess.run(["mmdebstrap", "--quiet", "--variant=extract", "--architectures=amd64",
                    "--include=shim-signed,shim-helpers-amd64-signed,grub-efi-amd64-signed,"
                    "linux-image-cloud-amd64", "bookworm", str(root)], check=True,
                   capture_output=True, timeout=600)
    [kernel] = root.glob("boot/vmlinuz-*")
    files = {source: root / source for source, _ in SIGNED_CHAIN["x86_64"]}
    return {**files, f"usr/lib/modules/{KVER}/vmlinuz": kernel}


def console_until(machine: Machine, work: Path, wanted: str, seconds: float) -> str:
    """The console from QEMU's start until a line has `wanted` (else AssertionError)."""
    work.mkdir(exist_ok=True)
    seen: list[str] = []
    with power_on(machine, work / "serial.log", work / "qmp.sock") as boot:
        while boot.running() and boot.seconds() < seconds:
            seen += boot.lines()
            if any(wanted in line for line in seen):
                print(f"{wanted!r} {boot.seconds():.1f}s after QEMU's start")
                return "\n".join(seen)
            time.sleep(0.5)
    raise AssertionError(f"no {wanted!r} within {seconds}s:\n" + "\n".join(seen[-40:]))


def test_with_secure_boot_enforced_the_signed_chain_counts_the_boot_and_starts_the_kernel(
        tmp_path: Path, debian_signed: dict[str, Path]) -> None:
    """OVMF with Microsoft's keys starts shim, shim Debian's GRUB, GRUB (its grubenv read
    and written) Debian's kernel, which sees Secure Boot and locks itself down. The
    initramfs is a stand-in: the kernel stops there, what follows is the base's."""
    repo, commit = small_commit(tmp_path, files=debian_signed)
    image = build_disk(Runner(), Deployment(repo.path, REF, commit), tmp_path / "out", "t",
                       epoch=EPOCH, qcow2=False, secure_boot=True)
    machine = Machine(image.raw, snapshot=True, firmware="uefi", secure_boot=True)
    log = console_until(machine, tmp_path / "boot", "secureboot: Secure boot enabled",
                        seconds=300)
    assert MENU_LINE in log and "Kernel is locked down from EFI Secure Boot" in log
    grub = log[:log.index(MENU_LINE)]
    assert "error:" not in grub, grub[-2000:]


def test_with_secure_boot_enforced_the_firmware_refuses_grub_made_here(tmp_path: Path) -> None:
    repo, commit = small_commit(tmp_path)
    image = build_disk(Runner(), Deployment(repo.path, REF, commit), tmp_path / "out", "t",
                       epoch=EPOCH, qcow2=False)
    machine = Machine(image.raw, snapshot=True, firmware="uefi", secure_boot=True)
    log = console_until(machine, tmp_path / "boot", "Access Denied", seconds=120)
    assert MENU_LINE not in log
