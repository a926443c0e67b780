"""UEFI disk images (the default): a GPT with an EFI system partition whose GRUB finds /boot by
its UUID, the same bytes from the same inputs, and an image apart from the BIOS one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from builder.core.errors import BuildError
from builder.core.runner import Runner
from builder.disk.deployment import Deployment
from builder.disk.efi import SIGNED_CHAIN, SIGNED_PREFIX, chain_config, embedded_config
from builder.disk.image import build_disk
from builder.disk.layout import BOOT_SIZE, ESP_SIZE, ESP_TYPE, LINUX_TYPE, Layout
from tests.disk.test_image import EPOCH, REF, debugfs_cat, small_commit
from tests.support import requires

pytestmark = [pytest.mark.integration,
              requires.root_only("the deployed files keep their owners")]


def partitions(raw: Path) -> dict[str, object]:
    out = subprocess.run(["sfdisk", "--json", str(raw)], capture_output=True, text=True,
                         check=True).stdout
    table: dict[str, object] = json.loads(out)["partitiontable"]
    return table


def esp_file(raw: Path, offset: int, name: str, dest: Path) -> bytes:
    subprocess.run(["mcopy", "-n", "-i", f"{raw}@@{offset}", f"::{name}", str(dest)],
                   check=True, capture_output=True, env={"MTOOLS_SKIP_CHECK": "1"})
    return dest.read_bytes()


def test_a_uefi_image_has_a_gpt_an_esp_fsck_accepts_and_the_same_bytes_twice(
        tmp_path: Path) -> None:
    repo, commit = small_commit(tmp_path)
    deployment = Deployment(repo.path, REF, commit, remote_url="http://10.0.2.100/repo/")
    first = build_disk(Runner(), deployment, tmp_path / "a", "test.x86_64", epoch=EPOCH)
    second = build_disk(Runner(), deployment, tmp_path / "b", "test.x86_64", epoch=EPOCH,
                        firmware="uefi")
    assert first.firmware == "uefi" and first.boot_uuid == second.boot_uuid
    assert first.raw.read_bytes() == second.raw.read_bytes()
    assert first.qcow2 and second.qcow2 and first.qcow2.read_bytes() == second.qcow2.read_bytes()
    assert json.loads(first.manifest.read_text())["firmware"] == "uefi"

    layout = Layout("uefi")
    table = partitions(first.raw)
    assert table["label"] == "gpt"
    parts = table["partitions"]
    assert isinstance(parts, list)
    assert [(p["start"] * 512, p["size"] * 512, p["type"]) for p in parts] == [
        (1 << 20, ESP_SIZE, ESP_TYPE), (layout.boot_offset, BOOT_SIZE, LINUX_TYPE),
        (layout.root_offset, first.size - layout.root_offset - (1 << 20), LINUX_TYPE)]
    # The backup GPT is whole: sfdisk --verify finds nothing to say.
    verify = subprocess.run(["sfdisk", "--verify", str(first.raw)], capture_output=True,
                            text=True, check=False)
    assert verify.returncode == 0 and "No errors detected" in verify.stdout, verify.stdout

    esp = tmp_path / "esp.vfat"
    subprocess.run(["dd", f"if={first.raw}", f"of={esp}", "bs=1M", "skip=1",
                    f"count={ESP_SIZE >> 20}", "status=none"], check=True)
    subprocess.run(["fsck.vfat", "-n", str(esp)], check=True, capture_output=True)
    grub = esp_file(first.raw, 1 << 20, "/EFI/BOOT/BOOTX64.EFI", tmp_path / "BOOTX64.EFI")
    assert grub[:2] == b"MZ"                                   # a PE image, as UEFI loads
    assert embedded_config(first.boot_uuid).encode() in grub   # finds /boot by its UUID

    boot = f"{first.raw}?offset={layout.boot_offset}"
    root = f"{first.raw}?offset={layout.root_offset}"
    for fs in (boot, root):
        subprocess.run(["e2fsck", "-fn", fs], check=True, capture_output=True)
    # The same menu and environment block as under BIOS: GRUB counts boots the same way.
    assert "set boot_counter=-1" in debugfs_cat(boot, "/loader/grub.cfg")
    assert debugfs_cat(boot, "/grub2/grubenv").startswith("# GRUB Environment Block")
    assert f"UUID={first.boot_uuid} /boot ext4" in debugfs_cat(
        root, f"/ostree/deploy/edge/deploy/{commit}.0/etc/fstab")


def test_the_bios_and_uefi_images_of_a_commit_are_apart(tmp_path: Path) -> None:
    repo, commit = small_commit(tmp_path)
    deployment = Deployment(repo.path, REF, commit)
    uefi = build_disk(Runner(), deployment, tmp_path / "u", "t", epoch=EPOCH, qcow2=False)
    bios = build_disk(Runner(), deployment, tmp_path / "b", "t", epoch=EPOCH, qcow2=False,
                      firmware="bios")
    identities = {json.loads(image.manifest.read_text())["identity"] for image in (uefi, bios)}
    assert len(identities) == 2 and uefi.boot_uuid != bios.boot_uuid
    assert partitions(bios.raw)["label"] == "dos" and bios.firmware == "bios"
    # Asking for the other firmware under the same name builds it, not the cached one.
    again = build_disk(Runner(), deployment, tmp_path / "u", "t", epoch=EPOCH, qcow2=False,
                       firmware="bios")
    assert again.built and partitions(again.raw)["label"] == "dos"


def test_a_secure_boot_image_carries_the_commit_s_signed_shim_and_grub_and_their_grub_cfg(
        tmp_path: Path) -> None:
    signed = tmp_path / "signed"
    signed.mkdir()
    files = {}
    for source, name in SIGNED_CHAIN["x86_64"]:
        files[source] = signed / name
        files[source].write_bytes(f"MZ stand-in for Debian's {name}\n".encode())
    repo, commit = small_commit(tmp_path, files=files)
    deployment = Deployment(repo.path, REF, commit)
    image = build_disk(Runner(), deployment, tmp_path / "sb", "t", epoch=EPOCH, qcow2=False,
                       secure_boot=True)
    assert image.secure_boot and json.loads(image.manifest.read_text())["secure_boot"]
    for source, name in SIGNED_CHAIN["x86_64"]:
        got = esp_file(image.raw, 1 << 20, f"/EFI/BOOT/{name}", tmp_path / name)
        assert got == files[source].read_bytes()
    config = esp_file(image.raw, 1 << 20, f"/EFI/{SIGNED_PREFIX}/grub.cfg", tmp_path / "cfg")
    assert config.decode() == chain_config(image.boot_uuid)
    assert f"--set=root {image.boot_uuid}" in config.decode()
    plain = build_disk(Runner(), deployment, tmp_path / "sb", "t", epoch=EPOCH, qcow2=False)
    assert plain.built and not plain.secure_boot   # not the Secure Boot image's cache
    assert b"stand-in" not in esp_file(plain.raw, 1 << 20, "/EFI/BOOT/BOOTX64.EFI",
                                       tmp_path / "plain.efi")


def test_a_secure_boot_image_of_a_commit_without_the_signed_chain_is_refused(
        tmp_path: Path) -> None:
    repo, commit = small_commit(tmp_path)
    deployment = Deployment(repo.path, REF, commit)
    with pytest.raises(BuildError, match=r"no /usr/lib/shim/shimx64\.efi\.signed") as error:
        build_disk(Runner(), deployment, tmp_path / "sb", "t", epoch=EPOCH, qcow2=False,
                   secure_boot=True)
    assert "shim-signed and grub-efi-amd64-signed" in (error.value.hint or "")
    for firmware, arch in (("bios", "x86_64"), ("uefi", "aarch64")):
        with pytest.raises(BuildError, match="Secure Boot is for UEFI disk images of x86_64"):
            build_disk(Runner(), deployment, tmp_path / "x", "t", epoch=EPOCH, qcow2=False,
                       firmware=firmware, arch=arch, secure_boot=True)
