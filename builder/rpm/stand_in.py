"""One SAMPLE stand-in package: what it holds, and its spec generated with rpmfluff.

Shared by the SAMPLE base (builder/rpm/sample_base.py) and its SELinux policy stand-ins
(builder/rpm/sample_policy.py), which both build stand-ins this way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

SAMPLE_VERSION = "9.2.sample"


@dataclass(frozen=True)
class StandIn:
    name: str
    provides: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    files: dict[str, str | bytes] = field(default_factory=dict)  # install path -> content
    dirs: tuple[str, ...] = ()
    executables: tuple[str, ...] = ()  # files installed 0755


def stand_in_text(what: str) -> str:
    return f"SAMPLE stand-in for {what}; built by microshift-edge-builder, not the real package.\n"


def write_spec(stand_in: StandIn, arch: str, topdir: Path) -> Path:
    """Generate the stand-in's spec and sources with rpmfluff into topdir; return the spec."""
    import rpmfluff  # imported late: only sample-base needs it

    pkg = rpmfluff.SimpleRpmBuild(stand_in.name, SAMPLE_VERSION, "1", buildArchs=[arch])
    pkg.add_summary(f"SAMPLE stand-in for {stand_in.name} (offline demos and tests)")
    pkg.add_description(stand_in_text(stand_in.name).strip())
    pkg.addLicense("MIT")
    pkg.addUrl("https://example.invalid/microshift-edge-builder/sample-base")
    pkg.section_changelog = ("* Tue Nov 14 2023 microshift-edge-builder <builder@example.invalid>"
                             f" - {SAMPLE_VERSION}-1\n- SAMPLE stand-in package\n")
    for cap in stand_in.provides:
        pkg.add_provides(cap)
    for req in stand_in.requires:
        pkg.add_requires(req)
    for directory in stand_in.dirs:
        pkg.add_installed_directory(directory.lstrip("/"))
    for index, (path, content) in enumerate(sorted(stand_in.files.items())):
        pkg.add_installed_file(path.lstrip("/"), rpmfluff.SourceFile(f"file{index}", content),
                               mode="0755" if path in stand_in.executables else "0644")
    (topdir / "SOURCES").mkdir(parents=True, exist_ok=True)
    pkg.gather_sources(str(topdir / "SOURCES"))
    return Path(pkg.gather_spec_file(str(topdir)))
