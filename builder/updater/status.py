"""The updater's state, readable by the admin: `microshift-update status`.

/var/lib/microshift-update/status.json, replaced atomically at every change:
state is one of idle, checking, held, downloading, applying, staged, failed; `detail` says
more (the target commit, bytes so far, why a rollout holds the device, the reason of a
failure).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

STATE_DIR = Path("var/lib/microshift-update")
STATUS = "status.json"
STATES = ("idle", "checking", "held", "downloading", "applying", "staged", "failed")


@dataclass
class Status:
    state: str = "idle"
    detail: str = ""
    booted: str = ""
    target: str = ""
    target_version: str = ""
    method: str = ""          # "delta-file" or "pull"
    bytes_done: int = 0
    bytes_total: int = 0
    updated: float = field(default_factory=time.time)

    def text(self) -> str:
        if self.state == "downloading":
            percent = 100 * self.bytes_done // self.bytes_total if self.bytes_total else 0
            line = (f"downloading {self.bytes_done} of {self.bytes_total} bytes ({percent}%)"
                    f" of {self.target_version or self.target[:12]}")
        elif self.state == "staged":
            line = f"staged {self.target_version or ''} ({self.target[:12]}); " \
                   "it boots at the next reboot"
        elif self.state == "failed":
            line = f"failed: {self.detail}"
        else:
            line = self.state + (f": {self.detail}" if self.detail else "")
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.updated))
        return f"{line} (since {stamp})"


class StatusFile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> Status:
        try:
            data = json.loads(self.path.read_text())
            known = {k: v for k, v in data.items() if k in Status.__dataclass_fields__}
            return Status(**known)
        except (OSError, ValueError, TypeError):
            return Status()

    def write(self, status: Status) -> None:
        status.updated = time.time()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".new")
        tmp.write_text(json.dumps(asdict(status), indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.path)
