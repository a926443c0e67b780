"""Where the partitions are under each firmware, and the GPT's script: fixed by the image's
identity, so the same inputs write the same table (the image tests read it back)."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.core.errors import BuildError
from builder.core.runner import Runner
from builder.disk.efi import make_esp
from builder.disk.layout import BOOT_SIZE, ESP_SIZE, FIRST_SECTOR, Layout, esp_volume_id

IDENTITY = "ab" * 32


def test_bios_keeps_the_layout_uefi_puts_the_esp_first_and_leaves_room_for_the_backup_gpt(
) -> None:
    bios, uefi = Layout("bios"), Layout("uefi")
    assert (bios.boot_offset, bios.root_offset) == (1 << 20, (1 << 20) + BOOT_SIZE)
    assert bios.disk_size(1 << 30) == (1 << 20) + BOOT_SIZE + (1 << 30)
    assert uefi.boot_offset == FIRST_SECTOR * 512 + ESP_SIZE
    assert uefi.root_offset == uefi.boot_offset + BOOT_SIZE
    assert uefi.disk_size(1 << 30) == uefi.root_offset + (1 << 30) + (1 << 20)


def test_the_gpt_script_is_the_identity_s_and_another_identity_gets_other_guids() -> None:
    uefi = Layout("uefi")
    script = uefi.table(IDENTITY, 1 << 30)
    assert script == uefi.table(IDENTITY, 1 << 30)
    lines = script.splitlines()
    assert lines[0] == "label: gpt" and lines[1].startswith("label-id: ")
    assert "type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B" in lines[3]  # the ESP, first
    other = uefi.table("cd" * 32, 1 << 30)
    assert {line.split("uuid=")[1] for line in lines[3:]}.isdisjoint(
        {line.split("uuid=")[1] for line in other.splitlines()[3:]})
    assert Layout("bios").table(IDENTITY, 1 << 30).startswith("label: dos\nlabel-id: 0xabababab")
    assert esp_volume_id(IDENTITY) == esp_volume_id(IDENTITY)
    assert len(esp_volume_id(IDENTITY)) == 8


def test_an_unknown_firmware_is_refused_with_the_choices() -> None:
    with pytest.raises(BuildError) as caught:
        Layout("coreboot")
    assert "coreboot" in caught.value.message and "uefi, bios" in (caught.value.hint or "")


def test_an_esp_without_mtools_is_refused_in_one_line_with_the_package(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no mcopy on it (mkfs.vfat is in sbin)
    with pytest.raises(BuildError) as caught:
        make_esp(Runner(), tmp_path / "esp.vfat", 64 << 20, tree=tmp_path, volume_id="1234abcd",
                 epoch=0)
    assert "'mcopy'" in caught.value.message and "mtools" in (caught.value.hint or "")
    assert not (tmp_path / "esp.vfat").exists()
