"""One boot of the VM, read from its serial console until it ends.

A boot ends when QEMU exits (the guest rebooted: greenboot's redboot, or the updater after
staging), when it has settled (greenboot's verdict, then nothing more to happen: the updater
found no update, or redboot asks for manual intervention; the harness then powers the VM
off through ACPI, as a person would press the button), or when its time is up. What the
console says is what the guest's own programs print: GRUB's line from the generated menu,
the SAMPLE base's boot report, greenboot's status, microshift-update's log.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from builder.vm.qemu import PowerOn

GRUB = re.compile(r"grub: entry (\d+) boot_counter=(-?\d*)")
BOOTED = re.compile(r"sample-boot-report: booted commit=([0-9a-f]{64}|unknown) version=(\S+)"
                    r"(?: image=(sha256:[0-9a-f]{64}))?")
VERDICT = re.compile(r"Boot Status is (GREEN|RED)")
UPDATER = re.compile(r"microshift-update: (.*)$")
ADMIN = re.compile(r"sample-admin: (.*)$")   # the migrate scenario's admin (vm/migration.py)
IDLE = ("up to date:", "was rolled back by greenboot on this device", "failed:")
ADMIN_IDLE = ("done:", "failed:")
MANUAL = "Manual intervention necessary"


@dataclass
class BootRecord:
    number: int
    entry: int | None = None             # the GRUB menu entry (1: the rollback deployment)
    boot_counter: int | None = None      # GRUB's counter as it booted (after its decrement)
    commit: str | None = None
    version: str | None = None
    image: str | None = None             # the manifest digest a bootc image deployment is of
    verdict: str | None = None           # "green" or "red"
    ended: str = "running"               # "reboot", "settled", "time limit"
    seconds: float = 0.0
    updater: list[str] = field(default_factory=list)
    admin: list[str] = field(default_factory=list)
    grubenv_after: dict[str, str] = field(default_factory=dict)
    serial_log: str = ""
    last_lines: list[str] = field(default_factory=list)

    def settled(self) -> bool:
        if self.verdict == "green":
            return any(marker in line for line in self.updater for marker in IDLE) or \
                any(line.startswith(ADMIN_IDLE) for line in self.admin)
        return False

    def read(self, line: str) -> None:
        for pattern, action in ((GRUB, self._grub), (BOOTED, self._booted),
                                (VERDICT, self._verdict), (UPDATER, self._updater),
                                (ADMIN, self._admin)):
            match = pattern.search(line)
            if match:
                action(match)
        self.last_lines = [*self.last_lines[-19:], line]

    def _grub(self, match: re.Match[str]) -> None:
        self.entry = int(match.group(1))
        self.boot_counter = int(match.group(2)) if match.group(2) else None

    def _booted(self, match: re.Match[str]) -> None:
        self.commit, self.version, self.image = match.group(1), match.group(2), match.group(3)

    def _verdict(self, match: re.Match[str]) -> None:
        self.verdict = match.group(1).lower()

    def _updater(self, match: re.Match[str]) -> None:
        self.updater.append(match.group(1).strip())

    def _admin(self, match: re.Match[str]) -> None:
        self.admin.append(match.group(1).strip())

    def to_dict(self) -> dict[str, object]:
        return {"boot": self.number, "commit": self.commit, "version": self.version,
                "image": self.image,
                "verdict": self.verdict, "boot_counter": self.boot_counter,
                "grub_entry": self.entry, "grubenv_after": self.grubenv_after,
                "ended": self.ended, "seconds": round(self.seconds, 1),
                "updater": self.updater, "admin": self.admin, "serial_log": self.serial_log}


def watch(boot: PowerOn, record: BootRecord, deadline: float) -> None:
    """Follow the console until the boot ends; powers a settled VM off."""
    manual = False
    while True:
        for line in boot.lines():
            record.read(line)
            manual = manual or MANUAL in line
        if not boot.running():
            record.ended = "settled" if manual else "reboot"
            break
        if record.settled() or (manual and record.verdict == "red"):
            record.ended = "settled"
            boot.stop()
            break
        if time.monotonic() > deadline:
            record.ended = "time limit"
            boot.stop(grace=20)
            break
        time.sleep(0.25)
    for line in boot.lines():
        record.read(line)
    record.seconds = boot.seconds()
