"""What the guest left on its disk, read while the VM is off: GRUB's environment block,
the deployments, MicroShift's data. debugfs reads each ext4 partition at its offset in the
raw image (no loop device, no mount); the offsets are the firmware's layout's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from builder.core.runner import Runner
from builder.disk.layout import Layout


@dataclass(frozen=True)
class DiskState:
    disk: Path
    runner: Runner
    osname: str = "edge"
    firmware: str = "bios"

    @property
    def _layout(self) -> Layout:
        return Layout(self.firmware)

    def _cat(self, offset: int, path: str) -> str | None:
        proc = self.runner.run(["debugfs", "-R", f'cat "{path}"', f"{self.disk}?offset={offset}"],
                               check=False)
        missing = b"File not found" in proc.stderr
        return None if proc.returncode != 0 or missing else proc.stdout.decode(errors="replace")

    def grubenv(self) -> dict[str, str]:
        text = self._cat(self._layout.boot_offset, "/grub2/grubenv") or ""
        return dict(line.split("=", 1) for line in text.splitlines()
                    if line and not line.startswith("#") and "=" in line)

    def var_file(self, path: str) -> str | None:
        """A file of the stateroot's /var, e.g. lib/microshift/version."""
        return self._cat(self._layout.root_offset,
                         f"/ostree/deploy/{self.osname}/var/{path.lstrip('/')}")

    def deployments(self) -> list[str]:
        """The deployed commits, as directories CHECKSUM.SERIAL under deploy/."""
        proc = self.runner.run(["debugfs", "-R", f"ls /ostree/deploy/{self.osname}/deploy",
                                f"{self.disk}?offset={self._layout.root_offset}"], check=False)
        names = proc.stdout.decode(errors="replace").split()
        return sorted({name.split(".")[0] for name in names
                       if len(name.split(".")[0]) == 64 and not name.endswith(".origin")})
