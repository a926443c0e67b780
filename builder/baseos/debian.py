"""The Debian side of the SAMPLE bootable base: which packages, from where, with mmdebstrap.

mmdebstrap installs the packages into a directory as root (`--mode=root`) and runs dracut
inside it for an initramfs with ostree's module (ostree-prepare-root), reproducibly
(`--reproducible`, SOURCE_DATE_EPOCH). The packages are whatever versions the mirror holds
on the day the base is built: the result is cached by its inputs and records what it got.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import BuildError, InputError
from builder.core.paths import BASEOS_DIR
from builder.core.progress import Progress
from builder.core.runner import Runner

PACKAGES = BASEOS_DIR / "packages.txt"
OVERLAY = BASEOS_DIR / "overlay"
# The SAMPLE bootc stand-in of the simulated device, the same program on the bootable base.
BOOTC_STANDIN = Path(__file__).resolve().parents[1] / "device/standins/bootc"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_SUITE = "bookworm"
DEBIAN_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
# dracut's modules for an ostree root on a plain partition, and nothing else: systemd in the
# initramfs (ostree's module requires it) with its root= handling, udev, ostree-prepare-root,
# e2fsck for the root, the shutdown hook that unmounts the root cleanly. Without the rest
# (dracut's own cmdline and mount hooks, storage stacks the disk does not use) and with only
# the drivers of the disks the image boots from, the initramfs is 12 MB instead of 20 and an
# emulated boot reaches the real root about 9 s sooner (docs/benchmarks.md).
DRACUT_MODULES = "systemd-initrd kernel-modules ostree base fs-lib shutdown"
DRACUT_DRIVERS = ("virtio_blk virtio_pci virtio_scsi "          # virtual machines
                  "ahci nvme sd_mod usb_storage uas xhci_pci ehci_pci "  # SATA, NVMe, USB
                  "ext4")
DRACUT_ARGS = ("--reproducible", "--no-hostonly", "--no-early-microcode",
               "--modules", DRACUT_MODULES, "--drivers", DRACUT_DRIVERS, "--force")
# Paths dpkg leaves out: documentation and translations are not needed to boot.
DPKG_EXCLUDES = ("/usr/share/man/*", "/usr/share/doc/*", "/usr/share/locale/*",
                 "/usr/share/info/*", "/usr/share/lintian/*")


@dataclass(frozen=True)
class DebianSource:
    """Where the base's packages come from and which ones it gets."""

    arch: str                      # the release's name: x86_64, aarch64
    suite: str = DEFAULT_SUITE
    mirror: str = DEFAULT_MIRROR
    packages: tuple[str, ...] = ()

    @property
    def debian_arch(self) -> str:
        return DEBIAN_ARCH[self.arch]

    def identity(self) -> dict[str, object]:
        return {"arch": self.arch, "suite": self.suite, "mirror": self.mirror,
                "packages": list(self.packages)}


def debian_source(arch: str, mirror: str | None = None) -> DebianSource:
    if arch not in DEBIAN_ARCH:
        raise InputError("command line", "--arch",
                         f"{arch!r} has no SAMPLE bootable base; allowed: "
                         f"{', '.join(DEBIAN_ARCH)}")
    if mirror is not None and not mirror.startswith(("http://", "https://", "file:/")):
        raise InputError("command line", "--mirror", f"{mirror!r} is not a Debian mirror URL",
                         hint=f"e.g. {DEFAULT_MIRROR}")
    return DebianSource(arch, mirror=mirror or DEFAULT_MIRROR,
                        packages=read_packages(PACKAGES, DEBIAN_ARCH[arch]))


def read_packages(path: Path, debian_arch: str) -> tuple[str, ...]:
    """One package a line; `{debarch}` is the Debian architecture, and a line ending in
    `[ARCH]` is that architecture's only."""
    names = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        name = line.split("#", 1)[0].strip().replace("{debarch}", debian_arch)
        if name.endswith("]") and "[" in name:
            name, only = (part.strip() for part in name[:-1].split("[", 1))
            if only != debian_arch:
                continue
        if not name:
            continue
        if not all(c.isalnum() or c in "+-.:" for c in name):
            raise InputError(str(path), f"line {number}", f"{name!r} is not a package name")
        names.append(name)
    return tuple(names)


def mmdebstrap(runner: Runner, progress: Progress, source: DebianSource, tree: Path,
               epoch: int) -> None:
    """Install the packages into `tree` (which must not exist) and build the initramfs."""
    initramfs = "/usr/lib/modules/$(ls /usr/lib/modules)/initramfs.img"
    dracut = shlex.join(["dracut", *DRACUT_ARGS])
    argv = ["mmdebstrap", "--mode=root", "--variant=minbase", f"--arch={source.debian_arch}",
            "--aptopt=APT::Install-Recommends \"false\"",
            f"--include={','.join(source.packages)}",
            *[f"--dpkgopt=path-exclude={path}" for path in DPKG_EXCLUDES],
            "--dpkgopt=path-include=/usr/share/doc/*/copyright",
            "--customize-hook=chroot \"$1\" sh -c "
            + shlex.quote(f'{dracut} "{initramfs}" "$(ls /usr/lib/modules)"'),
            source.suite, str(tree), source.mirror]
    env = {"SOURCE_DATE_EPOCH": str(epoch), "TMPDIR": str(tree.parent)}
    proc = runner.run(argv, env=env, check=False)
    if proc.returncode != 0:
        tail = "\n  ".join(proc.stderr.decode(errors="replace").strip().splitlines()[-8:])
        raise BuildError(f"mmdebstrap could not install the SAMPLE base's packages from "
                         f"{source.mirror} ({source.suite}, {source.debian_arch}):\n  {tail}",
                         hint="the bootable base needs a Debian mirror (--mirror URL for "
                              "another one, e.g. a local apt-cacher-ng)")
    progress.info(f"installed {len(source.packages)} Debian packages and their dependencies "
                  f"({source.suite}, {source.debian_arch})")


def installed_packages(tree: Path) -> list[str]:
    """`name version` of every package dpkg installed, for the base's record."""
    status = tree / "var/lib/dpkg/status"
    packages, name = [], ""
    for line in status.read_text().splitlines():
        if line.startswith("Package: "):
            name = line.split(" ", 1)[1]
        elif line.startswith("Version: ") and name:
            packages.append(f"{name} {line.split(' ', 1)[1]}")
            name = ""
    return sorted(packages)


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise BuildError(f"{what} needs root: mmdebstrap installs packages with their owners "
                         "(--mode=root), and ostree commits them",
                         hint="run it as root (sudo), as the compose runs")
