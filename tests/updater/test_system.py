"""Which deployment the updater believes is booted: the kernel's ostree= boot link, and when
that link is gone (greenboot's rollback rewrote the deployments since boot), the deployment
whose /usr is the booted root's, as libostree decides. Found on the VM tier: after a fallback
boot the updater failed with 'does not lead to a deployment'."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from builder.core.errors import BuildError
from builder.core.runner import Runner
from builder.updater.system import System

V1 = "a" * 64
V2 = "b" * 64


def device(tmp_path: Path, cmdline: str, booted: str) -> System:
    """A root view as the simulation composes one: /usr of the booted deployment, /sysroot."""
    sysroot = tmp_path / "sysroot"
    for commit, serial in ((V1, 0), (V2, 0)):
        deploy = sysroot / "ostree/deploy/edge/deploy" / f"{commit}.{serial}"
        (deploy / "usr").mkdir(parents=True)
        deploy.with_name(deploy.name + ".origin").write_text(
            "[origin]\nrefspec=edge:microshift/x86_64/microshift-minimal\n")
    # What ostree left after `admin undeploy 0`: boot.1 links to v1 as deployment 0.
    link = sysroot / "ostree/boot.1/edge/cafe/0"
    link.parent.mkdir(parents=True)
    os.symlink(f"../../../deploy/edge/deploy/{V1}.0", link)
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    (root / "proc/cmdline").write_text(f"BOOT_IMAGE=/vmlinuz rw {cmdline}\n")
    (root / "usr").symlink_to(sysroot / f"ostree/deploy/edge/deploy/{booted}.0/usr")
    (root / "sysroot").symlink_to(sysroot)
    return System(root, Runner())


def test_the_boot_link_of_the_command_line_names_the_booted_deployment(tmp_path: Path) -> None:
    booted = device(tmp_path, "ostree=/ostree/boot.1/edge/cafe/0", V1).booted()
    assert (booted.checksum, booted.osname, booted.remote, booted.ref) == \
        (V1, "edge", "edge", "microshift/x86_64/microshift-minimal")


def test_a_boot_link_gone_since_boot_falls_back_to_the_deployment_of_usr(
        tmp_path: Path) -> None:
    # Booted through GRUB's fallback as deployment 1 of boot version 0, then undeployed 0.
    system = device(tmp_path, "ostree=/ostree/boot.0/edge/beef/1", V1)
    assert system.booted().checksum == V1
    other = device(tmp_path / "other", "ostree=/ostree/boot.0/edge/beef/1", V2)
    assert other.booted().checksum == V2


def test_no_deployment_with_this_usr_is_one_clear_error(tmp_path: Path) -> None:
    system = device(tmp_path, "ostree=/ostree/boot.0/edge/beef/1", V1)
    (tmp_path / "root/usr").unlink()
    (tmp_path / "root/usr").mkdir()
    with pytest.raises(BuildError, match="no deployment has this root's /usr"):
        system.booted()
