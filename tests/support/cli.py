"""The project's paths and the in-process CLI, for tests of every stage."""

from __future__ import annotations

import subprocess
from pathlib import Path

from builder.cli import main
from builder.core.paths import PROJECT_ROOT

RELEASE = PROJECT_ROOT / "release.yaml"

__all__ = ["PROJECT_ROOT", "RELEASE", "build_release", "extract_rpm", "rpm_query", "run_cli"]


def run_cli(*args: str | Path) -> int:
    return main([str(a) for a in args])


def build_release(build_dir: Path, release: Path = RELEASE) -> Path:
    """Build the sample base and the release's RPMs into build_dir, in-process."""
    assert run_cli("--release", release, "sample-base", "--build-dir", build_dir) == 0
    assert run_cli("--release", release, "rpms", "--build-dir", build_dir) == 0
    return build_dir


def rpm_query(*args: str | Path) -> str:
    proc = subprocess.run(["rpm", *map(str, args)], capture_output=True, text=True, check=True)
    return proc.stdout


def extract_rpm(rpm: Path, dest: Path) -> Path:
    """The RPM's payload unpacked into dest/RPM-NAME (rpm2cpio | cpio), no scriptlets run."""
    root = dest / rpm.name
    root.mkdir(parents=True, exist_ok=True)
    cpio = subprocess.run(["rpm2cpio", str(rpm)], capture_output=True, check=True).stdout
    subprocess.run(["cpio", "-idm", "--quiet"], input=cpio, cwd=root, check=True)
    return root
