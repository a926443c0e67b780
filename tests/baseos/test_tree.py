"""The SAMPLE bootable base's tree rules, on small trees (the VM tier builds the real one)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from builder.baseos.debian import PACKAGES, debian_source, read_packages
from builder.baseos.tree import enable_unit, kernel_layout, name_resolution
from builder.core.errors import BuildError, InputError


def test_enabling_a_unit_links_it_where_its_install_section_says(tmp_path: Path) -> None:
    units = tmp_path / "usr/lib/systemd/system"
    units.mkdir(parents=True)
    (units / "greenboot-grub2-set-counter.service").write_text(
        "[Unit]\nDescription=x\n\n[Install]\nRequiredBy=ostree-finalize-staged.service\n")
    (units / "greenboot-status.service").write_text(
        "[Install]\nWantedBy=multi-user.target redboot.target\n")
    for unit in ("greenboot-grub2-set-counter.service", "greenboot-status.service"):
        enable_unit(tmp_path, unit)
    etc = tmp_path / "etc/systemd/system"
    links = sorted(str(p.relative_to(etc)) for p in etc.rglob("*.service"))
    assert links == ["multi-user.target.wants/greenboot-status.service",
                     "ostree-finalize-staged.service.requires/"
                     "greenboot-grub2-set-counter.service",
                     "redboot.target.wants/greenboot-status.service"]
    assert os.readlink(etc / "redboot.target.wants/greenboot-status.service") == \
        "/usr/lib/systemd/system/greenboot-status.service"
    with pytest.raises(BuildError, match=r"no unit missing\.service"):
        enable_unit(tmp_path, "missing.service")


def test_the_kernel_moves_beside_its_initramfs_and_boot_is_emptied(tmp_path: Path) -> None:
    (tmp_path / "boot").mkdir()
    (tmp_path / "boot/vmlinuz-6.1.0-9-cloud-amd64").write_bytes(b"kernel")
    (tmp_path / "boot/initrd.img-6.1.0-9-cloud-amd64").write_bytes(b"initramfs-tools' own")
    (tmp_path / "vmlinuz").symlink_to("boot/vmlinuz-6.1.0-9-cloud-amd64")
    modules = tmp_path / "usr/lib/modules/6.1.0-9-cloud-amd64"
    modules.mkdir(parents=True)
    (modules / "initramfs.img").write_bytes(b"dracut's, with ostree-prepare-root")
    assert kernel_layout(tmp_path) == "6.1.0-9-cloud-amd64"
    assert (modules / "vmlinuz").read_bytes() == b"kernel"
    assert list((tmp_path / "boot").iterdir()) == []
    assert not (tmp_path / "vmlinuz").is_symlink()


def test_a_base_with_two_kernels_or_no_initramfs_is_refused(tmp_path: Path) -> None:
    (tmp_path / "boot").mkdir()
    for kver in ("6.1.0-1", "6.1.0-2"):
        (tmp_path / f"boot/vmlinuz-{kver}").write_bytes(b"k")
    with pytest.raises(BuildError, match="2 kernels in /boot"):
        kernel_layout(tmp_path)
    (tmp_path / "boot/vmlinuz-6.1.0-2").unlink()
    with pytest.raises(BuildError, match=r"no initramfs for 6\.1\.0-1: dracut did not run"):
        kernel_layout(tmp_path)


def test_the_package_list_names_the_kernel_of_each_architecture() -> None:
    assert "linux-image-cloud-amd64" in debian_source("x86_64").packages
    assert "linux-image-cloud-arm64" in debian_source("aarch64").packages
    assert {"ostree-boot", "dracut", "systemd", "python3", "grub-common"} <= \
        set(read_packages(PACKAGES, "amd64"))
    # arm64's UEFI GRUB is carried by the arm64 base only (Debian has it for arm64 hosts).
    assert "grub-efi-arm64-bin" in debian_source("aarch64").packages
    assert "grub-efi-arm64-bin" not in debian_source("x86_64").packages
    # x86_64's Secure Boot chain, signed by Microsoft (shim) and Debian (GRUB), for amd64 only.
    signed = {"shim-signed", "grub-efi-amd64-signed"}
    assert signed <= set(debian_source("x86_64").packages)
    assert not signed & set(debian_source("aarch64").packages)


def test_bad_inputs_name_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="'ppc64le' has no SAMPLE bootable base"):
        debian_source("ppc64le")
    with pytest.raises(InputError, match="not a Debian mirror URL"):
        debian_source("x86_64", "deb.debian.org")
    listing = tmp_path / "packages.txt"
    listing.write_text("# comment\nsystemd\nrm -rf\n")
    with pytest.raises(InputError) as caught:
        read_packages(listing, "amd64")
    assert caught.value.field == "line 3"


def test_the_hosts_own_names_need_no_dns_and_the_builders_resolver_is_not_kept(
        tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "resolv.conf").write_text("nameserver 10.255.255.53\n")  # the build machine's
    name_resolution(tmp_path)
    hosts = dict(line.split("\t", 1)[::-1] for line in (etc / "hosts").read_text().splitlines())
    assert hosts["localhost"] == "127.0.0.1"
    assert hosts["microshift-sample"] == "127.0.1.1"
    assert (etc / "hostname").read_text() == "microshift-sample\n"
    resolv = (etc / "resolv.conf").read_text()
    assert [line for line in resolv.splitlines() if line.startswith("nameserver")] == []
