"""The updater's state, readable by the admin: `microshift-update status`.

/var/lib/microshift-update/status.json, replaced atomically at every change:
state is one of idle, checking, held, downloading, applying, staged, failed; `detail` says
more (the target commit, bytes so far, why a rollout holds the device, the reason of a
failure).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from builder.core.bounded_json import Doc
from builder.updater.state import read_json, write_atomic

STATE_DIR = Path("var/lib/microshift-update")
STATUS = "status.json"
STATES = ("idle", "checking", "held", "downloading", "applying", "staged", "failed")
STATE_WORD = re.compile(f"^({'|'.join(STATES)})$")


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
        """The last status written (a new one when there is none); DamagedState when the
        file does not hold one: a run that cannot tell what it staged last does nothing."""
        data = read_json(self.path, _status_document)
        return Status() if data is None else _status(data)

    def write(self, status: Status) -> None:
        status.updated = time.time()
        write_atomic(self.path, json.dumps(asdict(status), indent=2, sort_keys=True) + "\n")


def _status_document(data: Any) -> None:
    _status(data)


def _status(data: Any) -> Status:
    doc = Doc(data, STATUS)
    text = {name: doc.text(name, required=False, default="", max_length=8192)
            for name in ("detail", "booted", "target", "target_version", "method")}
    doc.text("state", pattern=STATE_WORD, allowed=", ".join(STATES))
    return Status(state=data["state"], **text,
                  bytes_done=doc.integer("bytes_done", 0, 2 ** 50, required=False, default=0),
                  bytes_total=doc.integer("bytes_total", 0, 2 ** 50, required=False,
                                          default=0),
                  updated=doc.number("updated", 0, 2 ** 40, required=False, default=0.0))
