"""The SAMPLE base's static stand-in executable (the simulated device runs it as semodule)."""

from __future__ import annotations

import platform
import struct
import subprocess
from pathlib import Path

import pytest

from builder.rpm.sample_elf import EM_AARCH64, EM_X86_64, LOAD_ADDRESS, print_and_exit
from tests.support import requires

TEXT = "usage: semodule (SAMPLE stand-in)\n"


def header(binary: bytes) -> tuple[int, int, int, int]:
    """(e_type, e_machine, e_entry, p_filesz) of a 64-bit little-endian ELF."""
    assert binary[:6] == b"\x7fELF\x02\x01"
    e_type, e_machine, _, e_entry = struct.unpack_from("<HHIQ", binary, 16)
    p_type, p_flags, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", binary, 64)
    assert (p_type, p_flags, p_offset, p_vaddr) == (1, 5, 0, LOAD_ADDRESS)  # PT_LOAD, r-x
    return e_type, e_machine, e_entry, p_filesz


@pytest.mark.parametrize(("arch", "machine"), [("x86_64", EM_X86_64), ("aarch64", EM_AARCH64)])
def test_executable_is_one_static_segment_holding_the_text(arch: str, machine: int) -> None:
    binary = print_and_exit(arch, TEXT)
    e_type, e_machine, entry, size = header(binary)
    assert (e_type, e_machine) == (2, machine)  # ET_EXEC: no loader, no libraries
    assert size == len(binary) and LOAD_ADDRESS < entry < LOAD_ADDRESS + size
    assert binary.endswith(TEXT.encode())
    assert print_and_exit(arch, TEXT) == binary  # deterministic


def test_aarch64_code_points_at_the_text() -> None:
    binary = print_and_exit("aarch64", TEXT)
    code = binary.index(b"\x08\x08\x80\xd2")  # mov x8, #64 (write)
    adr = struct.unpack_from("<I", binary, code + 8)[0]
    assert adr & 0x9F00001F == 0x10000001  # adr x1, ...
    offset = ((adr >> 5) & 0x7FFFF) << 2 | (adr >> 29) & 3
    assert binary[code + 8 + offset:] == TEXT.encode()
    length = (struct.unpack_from("<I", binary, code + 12)[0] >> 5) & 0xFFFF
    assert length == len(TEXT)


@pytest.mark.skipif(platform.machine() != "x86_64",
                    reason=f"{requires.OTHER_ARCH}: runs the x86_64 binary natively")
def test_x86_64_executable_prints_its_text_and_exits_zero(tmp_path: Path) -> None:
    path = tmp_path / "semodule"
    path.write_bytes(print_and_exit("x86_64", TEXT))
    path.chmod(0o755)
    proc = subprocess.run([str(path), "--help"], capture_output=True, check=False)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, TEXT.encode(), b"")
