"""GRUB's environment block (/boot/grub2/grubenv) and greenboot's boot counting rules.

The file format is GRUB's: a 1024-byte block starting "# GRUB Environment Block", then
`name=value` lines, padded with '#'. The rules are those of greenboot's grub snippet
(greenboot.cfg) and its services, which the simulated bootloader and greenboot follow:

- upgrade (greenboot-grub2-set-counter): boot_counter=MAX, boot_success=0
- each boot, in grub: if boot_counter is set and boot_success=0, then at 0 (or -1) boot the
  rollback entry (default=1) and set boot_counter=-1, otherwise decrement; then boot_success=0
- healthy boot (greenboot-grub2-set-success): boot_success=1, boot_counter unset
- fallback boot (greenboot-rpm-ostree-grub2-check-fallback): boot_counter=-1 means grub
  fell back: make the rollback deployment the default and unset boot_counter
"""

from __future__ import annotations

import os
from pathlib import Path

from builder.core.errors import BuildError

HEADER = "# GRUB Environment Block\n"
SIZE = 1024


class Grubenv:
    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[str, str]:
        if not self.path.exists():
            return {}
        text = self.path.read_text()
        if not text.startswith(HEADER):
            raise BuildError(f"{self.path}: not a GRUB environment block")
        values: dict[str, str] = {}
        for line in text[len(HEADER):].splitlines():
            if line and not line.startswith("#") and "=" in line:
                name, value = line.split("=", 1)
                values[name] = value
        return values

    def write(self, values: dict[str, str]) -> None:
        body = HEADER + "".join(f"{k}={v}\n" for k, v in values.items())
        if len(body) > SIZE:
            raise BuildError(f"{self.path}: environment larger than {SIZE} bytes")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".new")
        tmp.write_text(body + "#" * (SIZE - len(body)))
        os.replace(tmp, self.path)

    def set(self, **values: str) -> None:
        self.write({**self.read(), **values})

    def unset(self, *names: str) -> None:
        self.write({k: v for k, v in self.read().items() if k not in names})

    def counter(self) -> int | None:
        value = self.read().get("boot_counter")
        return int(value) if value is not None and value.lstrip("-").isdigit() else None


def set_upgrade_counter(env: Grubenv, max_attempts: int) -> None:
    """greenboot-grub2-set-counter: a new deployment gets max_attempts boots to prove itself."""
    env.set(boot_counter=str(max_attempts), boot_success="0")


def grub_select(env: Grubenv) -> int:
    """What greenboot's grub snippet does at power-on; returns the entry index to boot."""
    values = env.read()
    entry = 0
    counter = values.get("boot_counter")
    if counter is not None and values.get("boot_success") == "0":
        if counter in ("0", "-1"):
            entry = 1
            values["boot_counter"] = "-1"
        else:
            values["boot_counter"] = str(int(counter) - 1)
    values["boot_success"] = "0"
    env.write(values)
    return entry


def mark_success(env: Grubenv) -> None:
    """greenboot-grub2-set-success."""
    values = env.read()
    values["boot_success"] = "1"
    values.pop("boot_counter", None)
    env.write(values)
