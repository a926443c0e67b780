"""One power-on of a virtual machine under QEMU, watched through its serial console.

Each boot is its own QEMU process (`-no-reboot`: a guest reboot ends the process, and the
next boot starts a fresh one; under TCG GRUB's disk reads are several times slower after an
in-place reset). The guest's only network is QEMU's user network with `restrict=on`: it
reaches nothing but the forwards given here, each a service on this machine's loopback,
through `guestfwd` (a relay process per connection, builder.vm.guest_relay). QEMU dies with the
process that started it (setpriv --pdeathsig), so a killed scenario leaves no VM behind.
The firmware is SeaBIOS (QEMU's default) or OVMF (UEFI, builder.vm.firmware) with the VM's
own variable store, which persists across the boots as a device's NVRAM does. With Secure
Boot (x86_64), OVMF's Secure Boot build on a q35 machine: that OVMF keeps its variables
behind SMM (System Management Mode), so the machine has SMM and its flash answers only SMM's
writes (`secure`): a guest cannot change the keys past the firmware.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from builder.core.errors import BuildError, MissingToolError
from builder.core.files import write_atomic
from builder.core.runner import find_tool
from builder.vm.firmware import ensure_vars, pflash_options, vars_path

# (program, board, CPU) per guest architecture. x86_64: QEMU's default CPU model offers
# AMD's SVM, and the guest's udev then loads kvm and kvm_amd at every boot, seconds of
# emulated CPU for a hypervisor nobody runs there. aarch64: QEMU's virt board, its PL011 UART
# the console (ttyAMA0), and the Cortex-A57: a fixed model, where `max` changes with every
# QEMU release. `max` alone makes Debian's kernel (pointer authentication on every call)
# pay for the architected QARMA5 algorithm emulated (QEMU's developers put it at up to half
# the run time under TCG); `max,pauth-impdef=on` (TCG only) reached greenboot's verdict in
# 189 s against the A57's 195 s, two VMs side by side (docs/benchmarks.md): not worth a
# model that moves.
BOARDS = {"x86_64": ("qemu-system-x86_64", "pc", "qemu64,-svm"),
          "aarch64": ("qemu-system-aarch64", "virt", "cortex-a57")}


@dataclass(frozen=True)
class Forward:
    """Guest TCP address GUEST_IP:GUEST_PORT reaches 127.0.0.1:HOST_PORT on this machine."""

    guest_ip: str
    guest_port: int
    host_port: int

    def option(self) -> str:
        relay = f"{sys.executable} -m builder.vm.guest_relay 127.0.0.1 {self.host_port}"
        if "," in relay:
            raise BuildError(f"the relay command {relay!r} has a comma, which QEMU's option "
                             "syntax cannot carry")
        return f"guestfwd=tcp:{self.guest_ip}:{self.guest_port}-cmd:{relay}"


@dataclass(frozen=True)
class Machine:
    disk: Path
    accel: str = "tcg"                 # kvm or tcg
    memory_mib: int = 1024
    cpus: int = 2
    forwards: tuple[Forward, ...] = ()
    snapshot: bool = False             # writes go to a temporary overlay, not the disk
    firmware: str = "bios"             # bios (SeaBIOS) or uefi (OVMF, AAVMF on aarch64)
    arch: str = "x86_64"               # x86_64 or aarch64 (UEFI only)
    # uefi: the VM's firmware variables (builder.vm.firmware.ensure_vars: beside the disk)
    variables: Path | None = None
    secure_boot: bool = False          # uefi on x86_64: OVMF enforcing Secure Boot

    def _board(self) -> tuple[str, str, str, list[str]]:
        """QEMU's program, machine, CPU, and what the firmware adds to the command line."""
        if self.arch not in BOARDS:
            raise BuildError(f"no QEMU board for {self.arch} VMs ({', '.join(BOARDS)})")
        if self.secure_boot and (self.firmware != "uefi" or self.arch != "x86_64"):
            raise BuildError("Secure Boot is for x86_64 VMs booting through UEFI",
                             hint="drop --secure-boot")
        if self.arch == "aarch64" and self.firmware != "uefi":
            raise BuildError("an aarch64 VM boots through UEFI only",
                             hint="drop --firmware bios")
        program, board, cpu = BOARDS[self.arch]
        if self.firmware != "uefi":
            return program, board, cpu, []
        variables = self.variables or ensure_vars(self.disk, self.arch, self.secure_boot)
        flash = pflash_options(variables, self.arch, self.secure_boot)
        if self.secure_boot:
            board = "q35,smm=on"
            flash = ["-global", "driver=cfi.pflash01,property=secure,value=on", *flash]
        return program, board, cpu, flash

    def argv(self, serial: Path, qmp: Path) -> list[str]:
        program, board, cpu, uefi = self._board()
        qemu = find_tool(program)
        if qemu is None:
            raise MissingToolError(program)
        netdev = ",".join(["user", "id=net0", "restrict=on",
                           *(forward.option() for forward in self.forwards)])
        return [qemu, "-machine", f"{board},accel={self.accel}", "-cpu", cpu, *uefi,
                "-m", str(self.memory_mib),
                "-smp", str(self.cpus), "-nodefaults", "-display", "none", "-no-reboot",
                "-drive", f"file={self.disk},format=raw,if=virtio,cache=unsafe"
                + (",snapshot=on" if self.snapshot else ""),
                "-netdev", netdev, "-device", "virtio-net-pci,netdev=net0",
                "-chardev", f"file,id=serial0,path={serial}", "-serial", "chardev:serial0",
                "-qmp", f"unix:{qmp},server=on,wait=off", "-rtc", "base=utc"]


@dataclass
class PowerOn:
    """A running boot: its process, serial log and QMP socket."""

    process: subprocess.Popen[bytes]
    serial: Path
    qmp: Path
    started: float = field(default_factory=time.monotonic)
    _offset: int = 0
    _partial: str = ""

    def lines(self) -> list[str]:
        """Serial lines written since the last call (ANSI escapes and CRs removed)."""
        try:
            with self.serial.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        text = self._partial + data.decode(errors="replace")
        *whole, self._partial = text.split("\n")
        return [_clean(line) for line in whole]

    def running(self) -> bool:
        return self.process.poll() is None

    def seconds(self) -> float:
        return time.monotonic() - self.started

    def command(self, name: str) -> None:
        """A QMP command (system_powerdown, quit); a VM that is gone already is fine."""
        with contextlib.suppress(OSError), \
                socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(str(self.qmp))
            stream = sock.makefile("rw")
            stream.readline()  # the greeting
            for request in ("qmp_capabilities", name):
                stream.write(json.dumps({"execute": request}) + "\n")
                stream.flush()
                stream.readline()

    def stop(self, grace: float = 60.0) -> None:
        """ACPI power-off, then quit, then kill: the guest gets `grace` seconds to shut down
        (systemd unmounts its file systems), then QEMU is made to stop."""
        if self.running():
            self.command("system_powerdown")
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(grace)
        if self.running():
            self.command("quit")
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(10)
        if self.running():
            self.process.kill()
            self.process.wait()


@contextlib.contextmanager
def power_on(machine: Machine, serial: Path, qmp: Path) -> Iterator[PowerOn]:
    """Start QEMU; on leaving, whatever happened, it is stopped (killed if it must be)."""
    serial.unlink(missing_ok=True)
    qmp.unlink(missing_ok=True)
    # setpriv sets the parent-death signal and execs QEMU: it outlives no killed scenario.
    argv = ["setpriv", "--pdeathsig", "SIGKILL", "--", *machine.argv(serial, qmp)]
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, start_new_session=True)
    boot = PowerOn(process, serial, qmp)
    try:
        yield boot
    finally:
        if boot.running():
            boot.process.kill()
        boot.process.wait()
        # The relays of guestfwd are QEMU's children: their connections are closed now.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        qmp.unlink(missing_ok=True)


def _clean(line: str) -> str:
    out, index = [], 0
    while index < len(line):
        char = line[index]
        if char == "\x1b":
            index += 1
            if index < len(line) and line[index] == "[":
                index += 1
                while index < len(line) and not line[index].isalpha():
                    index += 1
            index += 1
            continue
        if char not in "\r\x00":
            out.append(char)
        index += 1
    return "".join(out)


def probe_accel(disk: Path, seconds: float, wanted: str, *, cache: Path | None = None,
                firmware: str = "bios", arch: str = "x86_64") -> tuple[str, str]:
    """The accelerator to boot with and why: KVM when /dev/kvm is usable and a KVM boot
    reaches GRUB's menu within `seconds`, else TCG (software emulation). What a probe found
    holds until the host reboots: it is kept in `cache` with the host's boot id."""
    if wanted == "tcg":
        return "tcg", "asked for"
    if arch != os.uname().machine:
        # KVM runs the host's own architecture only; the cached answer is about that.
        if wanted == "kvm":
            raise BuildError(f"--accel kvm: an {arch} VM on an {os.uname().machine} host")
        return "tcg", f"an {arch} VM on an {os.uname().machine} host"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        if wanted == "kvm":
            raise BuildError("--accel kvm: /dev/kvm is not usable here")
        return "tcg", "no usable /dev/kvm"
    found = _cached_probe(cache)
    if found is None:
        found = _probe_kvm(disk, seconds, firmware, arch)
        if cache is not None:
            write_atomic(cache, json.dumps({"boot_id": _boot_id(), "accel": found[0],
                                            "reason": found[1]}).encode())
    accel, reason = found
    if wanted == "kvm" and accel != "kvm":
        raise BuildError(f"--accel kvm: {reason}")
    return accel, reason


def _probe_kvm(disk: Path, seconds: float, firmware: str, arch: str) -> tuple[str, str]:
    work = disk.parent
    # The probe's firmware variables are its own: the VM's NVRAM starts as a device's would.
    variables = vars_path(work / "kvm-probe")
    variables.unlink(missing_ok=True)
    probe = Machine(disk, accel="kvm", snapshot=True, firmware=firmware, arch=arch,
                    variables=ensure_vars(work / "kvm-probe", arch) if firmware == "uefi"
                    else None)
    serial, qmp = work / "kvm-probe.serial", work / "kvm-probe.qmp"
    try:
        return _probe_boot(probe, serial, qmp, seconds)
    finally:
        serial.unlink(missing_ok=True)
        variables.unlink(missing_ok=True)


def _probe_boot(probe: Machine, serial: Path, qmp: Path, seconds: float) -> tuple[str, str]:
    with power_on(probe, serial, qmp) as boot:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and boot.running():
            if any(line.startswith("grub: entry") for line in boot.lines()):
                return "kvm", f"a KVM boot reached GRUB in {boot.seconds():.1f}s"
            time.sleep(0.2)
        error = "" if boot.running() else (boot.process.stderr.read().decode(errors="replace")
                                           if boot.process.stderr else "")
    detail = f": {error.strip()[:200]}" if error.strip() else ""
    return "tcg", f"a KVM boot did not reach GRUB within {seconds:g}s{detail}"


def _cached_probe(cache: Path | None) -> tuple[str, str] | None:
    try:
        found = json.loads(cache.read_text()) if cache is not None else None
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict) or found.get("boot_id") != _boot_id() or \
            found.get("accel") not in ("kvm", "tcg"):
        return None
    return str(found["accel"]), f"{found.get('reason')} (probed earlier since this host's boot)"


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""
