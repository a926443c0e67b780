"""systemd unit enablement done offline, the way `systemctl --root TREE enable/preset` does.

Scriptlets do not run at compose time (see builder/compose/rootfs.py), so what a package's %post
would do with `systemctl preset UNIT` is done here: read the tree's preset files, and for a
unit whose first matching preset line says `enable`, create the symlinks its [Install]
section asks for under /etc/systemd/system. Blueprint `services.enabled/disabled` then win
over presets, as in osbuild's org.osbuild.systemd stage.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import BuildError

UNIT_DIRS = ("etc/systemd/system", "usr/lib/systemd/system")
PRESET_DIRS = ("etc/systemd/system-preset", "usr/lib/systemd/system-preset")
UNIT_SUFFIXES = (".service", ".socket", ".timer", ".target", ".path", ".mount")
ETC_UNITS = "etc/systemd/system"


@dataclass(frozen=True)
class Install:
    wanted_by: tuple[str, ...] = ()
    required_by: tuple[str, ...] = ()
    alias: tuple[str, ...] = ()
    also: tuple[str, ...] = ()


def unit_file(tree: Path, unit: str) -> Path | None:
    """The unit's file (or its template's, for foo@bar.service), /etc before /usr/lib."""
    names = [unit]
    if "@" in unit and not unit.split("@", 1)[1].startswith("."):
        prefix, suffix = unit.split("@", 1)
        names.append(f"{prefix}@{suffix[suffix.rfind('.'):]}")
    for name in names:
        for directory in UNIT_DIRS:
            path = tree / directory / name
            if path.is_file() and not path.is_symlink():
                return path
    return None


def parse_install(path: Path) -> Install:
    values: dict[str, list[str]] = {"wantedby": [], "requiredby": [], "alias": [], "also": []}
    section = ""
    for raw in path.read_text(errors="replace").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        if section != "Install" or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key = key.strip().lower()
        if key in values:
            values[key].extend(value.split())
    return Install(tuple(values["wantedby"]), tuple(values["requiredby"]),
                   tuple(values["alias"]), tuple(values["also"]))


def enable(tree: Path, unit: str, _seen: frozenset[str] = frozenset()) -> list[str]:
    """Create the [Install] symlinks of `unit`; returns them (paths on the device)."""
    path = unit_file(tree, unit)
    if path is None:
        raise BuildError(f"cannot enable {unit}: no unit file in the tree")
    target = "/" + path.relative_to(tree).as_posix()
    install = parse_install(path)
    made: list[str] = []
    links = [f"{dep}.wants/{unit}" for dep in install.wanted_by]
    links += [f"{dep}.requires/{unit}" for dep in install.required_by]
    links += list(install.alias)
    for rel in links:
        link = tree / ETC_UNITS / rel
        link.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink(target, link)
        made.append(f"/{ETC_UNITS}/{rel}")
    for other in install.also:
        if other not in _seen:
            made += enable(tree, other, _seen | {unit})
    return made


def disable(tree: Path, unit: str) -> list[str]:
    """Remove every symlink under /etc/systemd/system that names or aliases `unit`."""
    removed: list[str] = []
    path = unit_file(tree, unit)
    aliases = set(parse_install(path).alias) if path else set()
    root = tree / ETC_UNITS
    if not root.is_dir():
        return removed
    for link in sorted(root.rglob("*")):
        if link.is_symlink() and (link.name == unit or link.name in aliases):
            link.unlink()
            removed.append("/" + link.relative_to(tree).as_posix())
    return removed


def presets(tree: Path) -> list[tuple[str, str]]:
    """(action, pattern) lines in systemd order: files sorted by name, /etc shadows /usr/lib."""
    files: dict[str, Path] = {}
    for directory in reversed(PRESET_DIRS):
        for path in (tree / directory).glob("*.preset"):
            files[path.name] = path
    rules: list[tuple[str, str]] = []
    for name in sorted(files):
        for raw in files[name].read_text(errors="replace").splitlines():
            fields = raw.split()
            if len(fields) >= 2 and fields[0] in ("enable", "disable"):
                rules.append((fields[0], fields[1]))
    return rules


def preset_action(rules: list[tuple[str, str]], unit: str) -> str:
    """The first matching rule wins; systemd's implicit default is enable."""
    for action, pattern in rules:
        if fnmatch.fnmatchcase(unit, pattern):
            return action
    return "enable"


def apply_presets(tree: Path, units: list[str]) -> list[str]:
    """`systemctl preset` for each unit that has a unit file and an [Install] section."""
    rules = presets(tree)
    enabled: list[str] = []
    for unit in sorted(set(units)):
        path = unit_file(tree, unit)
        if path is None or "@" in unit or parse_install(path) == Install():
            continue
        if preset_action(rules, unit) == "enable":
            enable(tree, unit)
            enabled.append(unit)
    return enabled


def units_in(files: list[str]) -> list[str]:
    """Unit names among package file paths, plus units named in their preset files."""
    dirs = {"/" + d for d in UNIT_DIRS}
    units = [Path(f).name for f in files
             if Path(f).parent.as_posix() in dirs and f.endswith(UNIT_SUFFIXES)]
    return sorted(set(units))


def preset_units(tree: Path, files: list[str]) -> list[str]:
    """Units a package's own preset files name explicitly (e.g. `enable openvswitch.service`)."""
    named: list[str] = []
    for f in files:
        if "/system-preset/" in f and f.endswith(".preset"):
            path = tree / f.lstrip("/")
            if path.is_file():
                for raw in path.read_text(errors="replace").splitlines():
                    fields = raw.split()
                    if len(fields) >= 2 and fields[0] == "enable" and "*" not in fields[1]:
                        named.append(fields[1])
    return named
