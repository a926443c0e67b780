"""The accelerator probe's answer is kept for the host's boot (the VM tier runs the probe);
QEMU's command line for a UEFI VM."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from builder.core.errors import BuildError
from builder.vm.firmware import ensure_vars, find_ovmf, vars_path
from builder.vm.qemu import Machine, _boot_id, _cached_probe, probe_accel


def test_a_probe_s_answer_holds_until_the_host_reboots(tmp_path: Path) -> None:
    cache = tmp_path / "accel.json"
    assert _cached_probe(cache) is None                    # never probed
    cache.write_text(json.dumps({"boot_id": _boot_id(), "accel": "tcg",
                                 "reason": "a KVM boot did not reach GRUB within 5s"}))
    accel, reason = _cached_probe(cache) or ("", "")
    assert accel == "tcg" and reason.startswith("a KVM boot did not reach GRUB within 5s")
    assert "probed earlier" in reason
    cache.write_text(json.dumps({"boot_id": "another-boot", "accel": "kvm", "reason": "x"}))
    assert _cached_probe(cache) is None                    # the host rebooted: probe again
    for garbage in ("{", "[]", json.dumps({"boot_id": _boot_id(), "accel": "hvf"})):
        cache.write_text(garbage)
        assert _cached_probe(cache) is None


def test_a_uefi_vm_boots_ovmf_read_only_with_its_own_variables_kept_beside_its_disk(
        tmp_path: Path) -> None:
    disk = tmp_path / "disk.raw"
    disk.write_bytes(b"")
    variables = ensure_vars(disk)
    assert variables == vars_path(disk) and variables.parent == tmp_path
    assert variables.read_bytes() == find_ovmf().vars_template.read_bytes()
    variables.write_bytes(b"boot entries the firmware wrote")
    assert ensure_vars(disk).read_bytes() == b"boot entries the firmware wrote"  # kept
    argv = Machine(disk, firmware="uefi", variables=variables).argv(tmp_path / "s", tmp_path / "q")
    flash = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-drive"
             and argv[i + 1].startswith("if=pflash")]
    assert flash == [f"if=pflash,format=raw,unit=0,readonly=on,file={find_ovmf().code}",
                     f"if=pflash,format=raw,unit=1,file={variables}"]
    assert not any("pflash" in arg for arg in Machine(disk).argv(tmp_path / "s", tmp_path / "q"))


def test_an_arm64_vm_is_qemu_s_virt_board_with_aavmf_and_never_asks_kvm(tmp_path: Path) -> None:
    disk = tmp_path / "disk.raw"
    disk.write_bytes(b"")
    argv = Machine(disk, firmware="uefi", arch="aarch64").argv(tmp_path / "s", tmp_path / "q")
    assert Path(argv[0]).name == "qemu-system-aarch64"
    assert argv[argv.index("-machine") + 1] == "virt,accel=tcg"
    assert f"if=pflash,format=raw,unit=0,readonly=on,file={find_ovmf('aarch64').code}" in argv
    assert vars_path(disk).read_bytes() == find_ovmf("aarch64").vars_template.read_bytes()
    with pytest.raises(BuildError, match="UEFI only"):
        Machine(disk, arch="aarch64").argv(tmp_path / "s", tmp_path / "q")
    # A KVM answer cached for the host's own architecture is not an arm64 VM's answer.
    cache = tmp_path / "accel.json"
    cache.write_text(json.dumps({"boot_id": _boot_id(), "accel": "kvm", "reason": "host"}))
    guest = "x86_64" if os.uname().machine == "aarch64" else "aarch64"
    accel, reason = probe_accel(disk, 5, "auto", cache=cache, firmware="uefi", arch=guest)
    assert accel == "tcg" and reason == f"an {guest} VM on an {os.uname().machine} host"


def test_a_secure_boot_vm_is_a_q35_with_smm_a_secure_flash_and_microsoft_s_keys(
        tmp_path: Path) -> None:
    disk = tmp_path / "disk.raw"
    disk.write_bytes(b"")
    ensure_vars(disk)                          # the plain store, beside the same disk
    argv = Machine(disk, firmware="uefi", secure_boot=True).argv(tmp_path / "s", tmp_path / "q")
    ovmf = find_ovmf(secure_boot=True)
    assert ovmf.code.name in ("OVMF_CODE_4M.secboot.fd", "OVMF_CODE.secboot.fd")
    assert argv[argv.index("-machine") + 1] == "q35,smm=on,accel=tcg"
    assert argv[argv.index("-global") + 1] == "driver=cfi.pflash01,property=secure,value=on"
    variables = vars_path(disk, secure_boot=True)
    assert f"if=pflash,format=raw,unit=0,readonly=on,file={ovmf.code}" in argv
    assert f"if=pflash,format=raw,unit=1,file={variables}" in argv
    assert variables.read_bytes() == ovmf.vars_template.read_bytes() != \
        vars_path(disk).read_bytes()
    for machine in (Machine(disk, secure_boot=True),
                    Machine(disk, firmware="uefi", arch="aarch64", secure_boot=True)):
        with pytest.raises(BuildError, match="Secure Boot is for x86_64 VMs booting through"):
            machine.argv(tmp_path / "s", tmp_path / "q")
