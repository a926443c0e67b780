"""Apply a blueprint's [customizations] to a tree the way Image Builder's stages would.

- files: osbuild's org.osbuild.copy of inline data, with mode and owner;
- services: org.osbuild.systemd (enabled, then disabled);
- firewall: org.osbuild.firewall runs `firewall-offline-cmd`, which writes zone XML under
  /etc/firewalld/zones; this writes the same XML directly (no firewalld on the build host),
  starting from the base's zone definition when it has one.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from builder.compose.inputs import Customizations, FileSpec, FirewallZone
from builder.compose.rootfs import replace_file, tree_path
from builder.compose.units import disable, enable, unit_file
from builder.core.errors import BuildError

DEFAULT_ZONE = "public"
BUILTIN_ZONES = {
    "public": ("Public", "For use in public areas. Only selected incoming connections are "
               "accepted.", None),
    "trusted": ("Trusted", "All network connections are accepted.", "ACCEPT"),
}


@dataclass
class Applied:
    """What was done, for the progress log and tests."""

    files: list[str] = field(default_factory=list)
    enabled: list[str] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)
    skipped_units: list[str] = field(default_factory=list)
    zones: list[str] = field(default_factory=list)


def apply_customizations(tree: Path, custom: Customizations, *, lenient_units: bool) -> Applied:
    """`lenient_units`: on the SAMPLE base, units of stand-in packages may not exist; skip them
    (reported) instead of failing as a real compose must."""
    applied = Applied()
    for spec in custom.files:
        write_file(tree, spec)
        applied.files.append(spec.path)
    for unit in custom.services_enabled:
        if unit_file(tree, unit) is None:
            if lenient_units:
                applied.skipped_units.append(unit)
                continue
            raise BuildError(f"blueprint customizations.services.enabled: {unit} has no unit "
                             "file in the image", hint="add the package that ships it")
        enable(tree, unit)
        applied.enabled.append(unit)
    for unit in custom.services_disabled:
        disable(tree, unit)
        applied.disabled.append(unit)
    applied.zones = apply_firewall(tree, custom.ports, custom.zones)
    return applied


def write_file(tree: Path, spec: FileSpec) -> None:
    uid = resolve_id(tree, "passwd", spec.user, spec.path)
    gid = resolve_id(tree, "group", spec.group, spec.path)
    target = tree_path(tree, spec.path)
    replace_file(target, spec.data, mode=spec.mode, uid=uid, gid=gid)


def resolve_id(tree: Path, database: str, name: str | int, path: str) -> int:
    """A user or group id from the tree's own databases (never the build host's)."""
    if isinstance(name, int) or str(name).isdigit():
        return int(name)
    if name == "root":
        return 0
    for candidate in (f"etc/{database}", f"usr/lib/{database}"):
        db = tree / candidate
        if db.is_file():
            for line in db.read_text(errors="replace").splitlines():
                fields = line.split(":")
                if len(fields) > 2 and fields[0] == name:
                    return int(fields[2])
    raise BuildError(f"blueprint file {path}: {'user' if database == 'passwd' else 'group'} "
                     f"{name!r} does not exist in the image", hint="use root or a numeric id")


def default_zone(tree: Path) -> str:
    conf = tree / "etc/firewalld/firewalld.conf"
    if conf.is_file():
        match = re.search(r"^DefaultZone=(\S+)", conf.read_text(), re.M)
        if match:
            return match.group(1)
    return DEFAULT_ZONE


def apply_firewall(tree: Path, ports: tuple[str, ...],
                   zones: tuple[FirewallZone, ...]) -> list[str]:
    """Write /etc/firewalld/zones/NAME.xml for the default zone (ports) and named zones."""
    changes: dict[str, tuple[list[str], list[str]]] = {}
    if ports:
        changes.setdefault(default_zone(tree), ([], []))[0].extend(ports)
    for zone in zones:
        name = zone.name or default_zone(tree)
        changes.setdefault(name, ([], []))[1].extend(zone.sources)
    for name, (zone_ports, sources) in sorted(changes.items()):
        root = _zone_xml(tree, name)
        for port in zone_ports:
            number, _, protocol = port.partition(":")
            if not any(el.get("port") == number and el.get("protocol") == protocol
                       for el in root.iter("port")):
                ET.SubElement(root, "port", {"port": number, "protocol": protocol})
        for source in sources:
            if not any(el.get("address") == source for el in root.iter("source")):
                ET.SubElement(root, "source", {"address": source})
        ET.indent(root, space="  ")
        text = ET.tostring(root, encoding="unicode", short_empty_elements=True)
        replace_file(tree / f"etc/firewalld/zones/{name}.xml",
                     f'<?xml version="1.0" encoding="utf-8"?>\n{text}\n'.encode())
    return sorted(changes)


def _zone_xml(tree: Path, name: str) -> ET.Element:
    for directory in ("etc/firewalld/zones", "usr/lib/firewalld/zones"):
        path = tree / directory / f"{name}.xml"
        if path.is_file():
            try:
                return ET.fromstring(path.read_text())
            except ET.ParseError as exc:
                raise BuildError(f"{path}: not valid firewalld zone XML: {exc}") from exc
    short, description, target = BUILTIN_ZONES.get(
        name, (name, f"Zone {name} (created by microshift-edge-builder).", None))
    root = ET.Element("zone", {"target": target} if target else {})
    ET.SubElement(root, "short").text = short
    ET.SubElement(root, "description").text = description
    return root
