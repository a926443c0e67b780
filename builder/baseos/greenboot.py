"""Upstream greenboot in the SAMPLE bootable base, as released, pinned by sha256.

greenboot is not packaged in Debian, so the base carries the files greenboot.spec installs
in the `greenboot` package of a release (fedora-iot/greenboot, baseos/greenboot/ copied
verbatim from the tag that baseos/greenboot.json names, each file's sha256 and install mode
listed there). A file that differs from its pin, or one the pins do not list, stops the
build: what boots is upstream's code or nothing. What Debian lacks around it is the
SAMPLE base's own (baseos/overlay/): `grub2-editenv` as a link to Debian's `grub-editenv`,
the `rpm-ostree rollback` the fallback check runs, console drop-ins for the VM scenarios.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import BuildError
from builder.core.paths import BASEOS_DIR
from builder.core.steps import file_digest

FILES = BASEOS_DIR / "greenboot"
PINS = BASEOS_DIR / "greenboot.json"
MODES = ("0644", "0755")
UNITS = "usr/lib/systemd/system/"


@dataclass(frozen=True)
class Release:
    """greenboot's released files as baseos/greenboot.json pins them."""

    tag: str
    commit: str
    files: dict[str, tuple[str, str]]   # path in the tree: (sha256, mode)

    @property
    def units(self) -> list[str]:
        """The unit files, by name, in name order."""
        return sorted(path.removeprefix(UNITS) for path in self.files if path.startswith(UNITS))


def read_pins(path: Path = PINS) -> Release:
    try:
        doc = json.loads(path.read_text())
        files = {name: (entry["sha256"], entry["mode"]) for name, entry in doc["files"].items()}
        release = Release(doc["tag"], doc["commit"], files)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BuildError(f"{path}: not greenboot's pin list ({exc})") from exc
    for name, (digest, mode) in files.items():
        if not re.fullmatch(r"[0-9a-f]{64}", digest) or mode not in MODES:
            raise BuildError(f"{path}: files.{name}: needs a sha256 (64 hex digits) and a mode "
                             f"of {', '.join(MODES)}, got {digest!r} and {mode!r}")
    return release


def verified(source: Path = FILES, pins: Path = PINS) -> Release:
    """The pinned release, once every file under `source` matched its pin."""
    release = read_pins(pins)
    present = {str(p.relative_to(source)) for p in source.rglob("*") if not p.is_dir()}
    for name in sorted(present - release.files.keys()):
        raise BuildError(f"{source / name}: not a file of greenboot {release.tag} "
                         f"({pins} does not list it)",
                         hint="the base carries upstream's files only; SAMPLE additions go "
                              "in baseos/overlay/")
    for name, (digest, _) in sorted(release.files.items()):
        path = source / name
        if name not in present or path.is_symlink():
            raise BuildError(f"{path}: missing; greenboot {release.tag} has it ({pins})")
        actual = file_digest(path)
        if actual != digest:
            raise BuildError(f"{path}: sha256 {actual} is not greenboot {release.tag}'s "
                             f"{digest} ({pins})",
                             hint=f"restore it from {release.tag} ({release.commit[:12]})")
    return release


def install(tree: Path, release: Release, source: Path = FILES) -> None:
    """Copy a release `verified` from `source` into `tree` at its install modes, as its
    package would."""
    for name, (_, mode) in sorted(release.files.items()):
        target = tree / "usr/share/licenses/greenboot/LICENSE" if name == "LICENSE" \
            else tree / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / name, target)
        os.chmod(target, int(mode, 8))
