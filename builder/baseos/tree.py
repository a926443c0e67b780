"""A Debian root made into the tree of an edge base commit.

What rpm-ostree's compose does for a RHEL for Edge commit, for the Debian tree mmdebstrap
made: the kernel and its initramfs under /usr/lib/modules/KVER/ (where ostree looks for them;
/boot stays empty), /etc stored as /usr/etc, /var empty (systemd-tmpfiles makes what it
needs at boot), the ostree integration links, upstream greenboot as released
(baseos/greenboot/, each file pinned: builder/baseos/greenboot.py), and the SAMPLE base's own
files from baseos/overlay (the GRUB menu generator, DHCP, what greenboot needs that Debian
lacks). The SAMPLE stand-in RPMs the release depsolves against are recorded in an rpm
database, without their files (`rpm --justdb`), so the compose installs only MicroShift's
packages on top, as it does on a RHEL for Edge base whose rpm database lists the real ones.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from builder.baseos import greenboot
from builder.baseos.debian import BOOTC_STANDIN, OVERLAY
from builder.compose.base import SAMPLE_DBPATH, integration_layout
from builder.compose.rootfs import clean_rpmdb, etc_to_usr_etc, rpm_env
from builder.core.errors import BuildError
from builder.core.runner import Runner

UNITS = Path("usr/lib/systemd/system")
# Units enabled besides those of the overlay: DHCP on the wired network, and waiting for it
# (network-online.target: MicroShift's components find the node IP on the default route).
# ostree's staging path unit is enabled by Debian's postinst already.
ENABLED = ("systemd-networkd.service", "systemd-networkd-wait-online.service")
# What Debian's packages enabled that an ostree image has no use for: apt and dpkg timers
# (the image is updated by ostree, not apt), a getty on a VGA console it does not have,
# ext4 scrubbing of LVM snapshots it does not make. Each also costs seconds of every boot
# under emulation.
DISABLED = ("timers.target.wants/apt-daily.timer", "timers.target.wants/apt-daily-upgrade.timer",
            "timers.target.wants/dpkg-db-backup.timer", "timers.target.wants/e2scrub_all.timer",
            "multi-user.target.wants/e2scrub_reap.service", "getty.target.wants/getty@tty1.service",
            "sysinit.target.wants/systemd-pstore.service")
GREENBOOT_DIRS = ("check/required.d", "check/wanted.d", "green.d", "red.d")
HOSTNAME = "microshift-sample"
# Names that must never need a DNS server: a lookup of this host's own addresses otherwise
# goes to the network and waits out the resolver's timeouts (the SAMPLE MicroShift's API,
# Python's http.server, looks up 127.0.0.1: 10 s of every boot on a network without DNS).
HOSTS = f"""127.0.0.1\tlocalhost
127.0.1.1\t{HOSTNAME}
::1\tlocalhost ip6-localhost ip6-loopback
ff02::1\tip6-allnodes
ff02::2\tip6-allrouters
"""
# mmdebstrap leaves the build machine's own resolver in the tree. The SAMPLE base names no
# DNS server: systemd-networkd takes the network from DHCP but does not write resolv.conf
# (systemd-resolved would, and it delays every boot by 2-3 s under emulation, before
# sysinit.target); a site with DNS adds its servers here through the blueprint's files.
RESOLV_CONF = """# SAMPLE base: no DNS server. This host's own names are in /etc/hosts; add
# `nameserver ADDRESS` lines for a network that has DNS.
"""


def make_bootable_tree(runner: Runner, tree: Path, standins: list[Path], epoch: int,
                       release: greenboot.Release) -> str:
    """Lay `tree` out as an edge base commit's tree; returns the kernel version."""
    kver = kernel_layout(tree)
    for name in ("dev", "proc", "sys", "run", "tmp", "var", "root", "usr/local"):
        _empty(tree / name)
    greenboot.install(tree, release)
    shutil.copytree(OVERLAY, tree, symlinks=True, dirs_exist_ok=True)
    for sub in GREENBOOT_DIRS:
        for top in ("usr/lib/greenboot", "etc/greenboot"):
            (tree / top / sub).mkdir(parents=True, exist_ok=True)
    overlay_units = sorted(p.name for p in (OVERLAY / UNITS).iterdir() if p.is_file())
    # greenboot's package enables all its units (%systemd_post, Fedora's presets).
    for unit in (*ENABLED, *release.units, *overlay_units):
        enable_unit(tree, unit)
    for link in DISABLED:
        (tree / "etc/systemd/system" / link).unlink(missing_ok=True)
    # greenboot calls /usr/bin/grub2-editenv, Debian names it grub-editenv.
    os.symlink("grub-editenv", tree / "usr/bin/grub2-editenv")
    # bootc is not packaged for Debian 12: image-mode devices get the simulation's SAMPLE
    # stand-in (on RHEL the image carries the real bootc).
    shutil.copyfile(BOOTC_STANDIN, tree / "usr/bin/bootc")
    (tree / "usr/bin/bootc").chmod(0o755)
    name_resolution(tree)
    # Empty: systemd makes the machine's own id at first boot.
    (tree / "etc/machine-id").write_text("")
    integration_layout(tree)
    record_standins(runner, tree, standins, epoch)
    clean_rpmdb(tree)
    etc_to_usr_etc(tree)
    return kver


def name_resolution(tree: Path) -> None:
    """The host's name, its own addresses without DNS, and no resolver of the build
    machine's."""
    (tree / "etc/hostname").write_text(HOSTNAME + "\n")
    (tree / "etc/hosts").write_text(HOSTS)
    resolv = tree / "etc/resolv.conf"
    if resolv.is_dir() and not resolv.is_symlink():
        shutil.rmtree(resolv)
    resolv.unlink(missing_ok=True)
    resolv.write_text(RESOLV_CONF)


def kernel_layout(tree: Path) -> str:
    """Move the one kernel to /usr/lib/modules/KVER/vmlinuz, beside dracut's initramfs."""
    kernels = sorted((tree / "boot").glob("vmlinuz-*"))
    if len(kernels) != 1:
        raise BuildError(f"the SAMPLE base has {len(kernels)} kernels in /boot, expected one "
                         f"({', '.join(k.name for k in kernels) or 'none'})")
    kver = kernels[0].name.removeprefix("vmlinuz-")
    modules = tree / "usr/lib/modules" / kver
    if not (modules / "initramfs.img").is_file():
        raise BuildError(f"the SAMPLE base has no initramfs for {kver}: dracut did not run",
                         hint="see mmdebstrap's output above (--debug)")
    shutil.move(kernels[0], modules / "vmlinuz")
    _empty(tree / "boot")
    for link in tree.iterdir():
        if link.is_symlink() and re.match(r"^(vmlinuz|initrd\.img)(\.old)?$", link.name):
            link.unlink()
    return kver


def enable_unit(tree: Path, unit: str) -> None:
    """What `systemctl enable` does for the unit's [Install] section, in /etc."""
    path = tree / UNITS / unit
    if not path.is_file():
        raise BuildError(f"the SAMPLE base has no unit {unit} to enable")
    for key, kind in (("WantedBy", "wants"), ("RequiredBy", "requires")):
        for line in re.findall(rf"^{key}=(.+)$", path.read_text(), re.M):
            for target in line.split():
                link = tree / "etc/systemd/system" / f"{target}.{kind}" / unit
                link.parent.mkdir(parents=True, exist_ok=True)
                if not link.is_symlink():
                    os.symlink(f"/{UNITS}/{unit}", link)


def record_standins(runner: Runner, tree: Path, standins: list[Path], epoch: int) -> None:
    """The SAMPLE stand-ins the release's lock names, in the rpm database only."""
    (tree / SAMPLE_DBPATH.lstrip("/")).mkdir(parents=True, exist_ok=True)
    runner.run(["rpm", "--root", str(tree), "--dbpath", SAMPLE_DBPATH, "-i", "--justdb",
                "--noscripts", "--notriggers", "--nosignature", "--ignorearch",
                *map(str, standins)], env=rpm_env(epoch))


def _empty(path: Path) -> None:
    """Remove what is inside `path` (a directory of the tree), never following symlinks."""
    if path.is_symlink() or not path.is_dir():
        return
    for entry in path.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
