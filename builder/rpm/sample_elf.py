"""A tiny static executable for the SAMPLE base: it prints a fixed text and exits 0.

The SAMPLE base has no real binaries (no loader, no shell), but on an upgrade a device's
ostree runs one of the new deployment's programs: it refreshes the SELinux policy by running
the deployment's `semodule --help` in bubblewrap and, only when that usage text offers
`--refresh` (or `--rebuild-if-modules-changed`), `semodule -N --refresh`
(ostree-sysroot-deploy.c, sysroot_finalize_selinux_policy). A static executable needs
neither loader nor libraries, so this one can stand in for semodule inside the simulated
device: its usage text offers no refresh, and ostree skips the refresh as it does on systems
whose semodule predates it. Generated deterministically: an ELF header, one loadable
segment, and the machine code of write(1, text) and exit(0) for the architecture.
"""

from __future__ import annotations

import struct

LOAD_ADDRESS = 0x400000
ELF_HEADER_SIZE = 64
PROGRAM_HEADER_SIZE = 56
EM_X86_64 = 62
EM_AARCH64 = 183


def _x86_64(text: bytes) -> bytes:
    code_size = 33
    code = (b"\xb8\x01\x00\x00\x00"                           # mov eax, 1 (write)
            b"\xbf\x01\x00\x00\x00"                           # mov edi, 1 (stdout)
            b"\x48\x8d\x35" + struct.pack("<i", code_size - 17)  # lea rsi, [rip + to text]
            + b"\xba" + struct.pack("<I", len(text))          # mov edx, len
            + b"\x0f\x05"                                     # syscall
            b"\xb8\x3c\x00\x00\x00"                           # mov eax, 60 (exit)
            b"\x31\xff"                                       # xor edi, edi
            b"\x0f\x05")                                      # syscall
    assert len(code) == code_size
    return code + text


def _aarch64(text: bytes) -> bytes:
    words = (0xD2800808,                       # mov x8, #64 (write)
             0xD2800020,                       # mov x0, #1 (stdout)
             0x10000000 | (6 << 5) | 1,        # adr x1, text (6 instructions ahead)
             0xD2800002 | (len(text) << 5),    # mov x2, #len
             0xD4000001,                       # svc #0
             0xD2800BA8,                       # mov x8, #93 (exit)
             0xD2800000,                       # mov x0, #0
             0xD4000001)                       # svc #0
    return b"".join(struct.pack("<I", word) for word in words) + text


MACHINES = {"x86_64": (EM_X86_64, _x86_64), "aarch64": (EM_AARCH64, _aarch64)}


def print_and_exit(arch: str, text: str) -> bytes:
    """A static ELF executable for `arch` that writes `text` to stdout and exits 0."""
    machine, assemble = MACHINES[arch]
    raw = text.encode()
    if len(raw) >= 1 << 16:
        raise ValueError("text too long for a 16-bit immediate")
    body = assemble(raw)
    entry = LOAD_ADDRESS + ELF_HEADER_SIZE + PROGRAM_HEADER_SIZE
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)  # 64-bit, little-endian, SysV
    header = ident + struct.pack("<HHIQQQIHHHHHH", 2, machine, 1, entry, ELF_HEADER_SIZE, 0, 0,
                                 ELF_HEADER_SIZE, PROGRAM_HEADER_SIZE, 1, 0, 0, 0)
    size = ELF_HEADER_SIZE + PROGRAM_HEADER_SIZE + len(body)
    segment = struct.pack("<IIQQQQQQ", 1, 5, 0, LOAD_ADDRESS, LOAD_ADDRESS, size, size, 0x10000)
    return header + segment + body
