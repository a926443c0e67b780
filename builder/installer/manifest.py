"""What an installer ISO holds besides its repository: the names of its files and its
manifest. Written by builder/installer/iso.py, read back by builder/installer/read_back.py."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from builder.core.runner import Runner

KICKSTART_NAME = "ks.cfg"
MANIFEST_NAME = "manifest.json"
SBOM_NAME = "sbom.spdx.json"


@dataclass(frozen=True)
class Manifest:
    image: str
    ref: str
    commit: str
    version: str | None
    signed: bool
    volume_id: str
    kickstart: str
    repo: str
    boot_iso: dict[str, str] | None
    sizes: dict[str, int]
    sbom: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


def ostree_output(runner: Runner, repo: Path, *args: str) -> str:
    return runner.output(["ostree", f"--repo={repo}", *args])
