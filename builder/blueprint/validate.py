"""Blueprint validation that mirrors osbuild/blueprint, so Image Builder accepts what we write.

Each violation is reported with its TOML path (`customizations.files[2].path: ...`), all of
them at once. The rules and where they come from:

- name: `^[a-zA-Z0-9._-]+$` (osbuild-composer's blueprint name rule); version: semantic
  version as github.com/coreos/go-semver parses it (blueprint.go `Initialize`).
- packages/modules/groups: every entry needs a name (blueprint.go `Initialize`).
- containers: `source` is required (blueprint.go `Container`); this project also requires a
  digest-pinned source, because the image cache must work offline.
- files/directories: the fsnode rules of osbuild/images (absolute, canonical, no trailing
  slash; user/group names or non-negative ids; mode `^0?[0-7]{3}$`, fsnode_customizations.go
  `validateModeString`), no duplicate paths and no path below a file
  (`ValidateDirFileCustomizations`), and for ostree image types the path policies
  `OstreeCustomFilesPolicies` / `OstreeCustomDirectoriesPolicies` (osbuild/images
  pkg/policies). `data` and `uri` (a local file:// source, osbuild/images) are exclusive.
- firewall ports: "port:protocol" or "first-last:protocol" (osbuild's org.osbuild.firewall
  stage), protocol tcp, udp, sctp or dccp.
"""

from __future__ import annotations

import ipaddress
import json
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from builder.core.errors import BuildError, InputError
from builder.core.schema import closest, key_text

NAME_RE = re.compile(r"^[a-zA-Z0-9._-]+$")
USER_RE = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,31}$")   # fsnode usernameRegex
GROUP_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,31}$")    # fsnode groupnameRegex
MODE_RE = re.compile(r"^0?[0-7]{3}$")
SEMVER_IDENT_RE = re.compile(r"^[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*$")
PORT_RE = re.compile(r"^(?P<first>[0-9]+|[a-z][a-z0-9-]*)(?:-(?P<last>[0-9]+))?"
                     r":(?P<proto>tcp|udp|sctp|dccp)$")
DIGEST_RE = re.compile(r"@sha256:[0-9a-f]{64}$")
MAC_RE = re.compile(r"^([0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}$")

# osbuild/images pkg/policies: the longest matching prefix decides; True allows.
OSTREE_FILE_POLICY = {"/": False, "/etc": True, "/root": True, "/usr/local/bin": True,
                      "/usr/local/sbin": True, "/etc/fstab": False, "/etc/shadow": False,
                      "/etc/passwd": False, "/etc/group": False}
OSTREE_DIR_POLICY = {"/": False, "/etc": True}
FILE_RULE = ("allowed only under /etc, /root, /usr/local/bin and /usr/local/sbin, never "
             "/etc/fstab, /etc/group, /etc/passwd or /etc/shadow (Image Builder's policy for "
             "ostree image types)")
DIR_RULE = "allowed only under /etc (Image Builder's policy for ostree image types)"

TOP_KEYS = ("name", "description", "version", "packages", "modules", "enabled_modules",
            "groups", "containers", "customizations", "distro", "architecture", "minimal")
CUSTOMIZATION_KEYS = (
    "hostname", "kernel", "sshkey", "user", "group", "timezone", "locale", "firewall",
    "services", "filesystem", "disk", "installation_device", "partitioning_mode", "fdo",
    "openscap", "ignition", "directories", "files", "repositories", "fips", "installer", "rpm",
    "rhsm", "cacerts", "containers-storage", "firstboot", "dnf", "iso")


@dataclass(frozen=True)
class Violation:
    field: str
    problem: str


def is_semver(version: str) -> bool:
    """github.com/coreos/go-semver `Version.Set`: split off +metadata, then -prerelease, then
    exactly three base-10 int64 parts; pre-release and metadata are dotted identifiers."""
    core, _, metadata = version.partition("+")
    core, _, prerelease = core.partition("-")
    parts = core.split(".", 2)
    if len(parts) != 3 or not all(re.fullmatch(r"[0-9]+", p) and int(p) < 2**63 for p in parts):
        return False
    return all(not ident or SEMVER_IDENT_RE.match(ident) for ident in (prerelease, metadata))


def go_clean(path: str) -> str:
    """Go's path.Clean, which osbuild uses to decide whether a path is canonical."""
    rooted = path.startswith("/")
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts and parts[-1] != "..":
                parts.pop()
            elif not rooted:
                parts.append(part)
            continue
        parts.append(part)
    cleaned = "/".join(parts)
    return ("/" + cleaned) if rooted else (cleaned or ".")


def policy_allows(path: str, policy: dict[str, bool]) -> bool:
    best = max((p for p in policy if p in ("/", path) or path.startswith(p + "/")),
               key=len)
    return policy[best]


def parse_blueprint(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(source, "", f"not valid TOML: {exc}") from exc


def check_blueprint(text: str, source: str) -> dict[str, Any]:
    """Parse and validate; raise one BuildError that lists every violation."""
    data = parse_blueprint(text, source)
    violations = validate_blueprint(data)
    if violations:
        # One line per violation, whatever characters the blueprint's values hold.
        lines = [_one_line(f"{source}: {v.field}: {v.problem}") for v in violations]
        raise BuildError(f"{source}: {len(violations)} blueprint rule violation(s):\n"
                         + "\n".join(lines))
    return data


def _one_line(text: str) -> str:
    return text if len(text.splitlines()) <= 1 else json.dumps(text)[1:-1]


def validate_blueprint(data: dict[str, Any]) -> list[Violation]:
    check = _Checker()
    check.keys(data, "", TOP_KEYS)
    name = check.string(data, "", "name", required=True)
    if name is not None and not NAME_RE.match(name):
        check.add("name", f"{name!r} is not allowed; allowed: letters, digits, '.', '_', '-'")
    check.string(data, "", "description")
    version = check.string(data, "", "version")
    if version is not None and not is_semver(version):
        check.add("version", f"{version!r} is not a semantic version; allowed: "
                             "MAJOR.MINOR.PATCH[-PRERELEASE][+METADATA], e.g. 4.14.2-1")
    for key in ("distro", "architecture"):
        check.string(data, "", key)
    for key in ("packages", "modules"):
        for field, entry in check.tables(data, "", key):
            check.keys(entry, field, ("name", "version"))
            check.string(entry, field, "name", required=True)
            pkg_version = check.string(entry, field, "version")
            if pkg_version is not None and (not pkg_version or re.search(r"\s", pkg_version)):
                check.add(f"{field}.version", f"{pkg_version!r} is not allowed; allowed: "
                          "a version, version-release or glob such as 4.14.* (no spaces)")
    for field, entry in check.tables(data, "", "groups"):
        check.keys(entry, field, ("name",))
        check.string(entry, field, "name", required=True)
    _containers(check, data)
    customizations = check.table(data, "", "customizations")
    if customizations is not None:
        _customizations(check, customizations)
    return check.violations


def _containers(check: _Checker, data: dict[str, Any]) -> None:
    for field, entry in check.tables(data, "", "containers"):
        check.keys(entry, field, ("source", "name", "tls-verify", "local-storage"))
        source = check.string(entry, field, "source", required=True)
        check.string(entry, field, "name")
        check.boolean(entry, field, "tls-verify")
        check.boolean(entry, field, "local-storage")
        if source and not DIGEST_RE.search(source):
            check.add(f"{field}.source", f"{source!r} is not pinned by digest; allowed: "
                      "REPOSITORY@sha256:<64 hex digits> (the image cache must work offline)")


def _customizations(check: _Checker, custom: dict[str, Any]) -> None:
    prefix = "customizations"
    check.keys(custom, prefix, CUSTOMIZATION_KEYS)
    check.string(custom, prefix, "hostname")
    services = check.table(custom, prefix, "services")
    if services is not None:
        check.keys(services, f"{prefix}.services", ("enabled", "disabled", "masked"))
        for key in ("enabled", "disabled", "masked"):
            check.strings(services, f"{prefix}.services", key)
    firewall = check.table(custom, prefix, "firewall")
    if firewall is not None:
        _firewall(check, firewall, f"{prefix}.firewall")
    _fs_nodes(check, custom)


def _firewall(check: _Checker, firewall: dict[str, Any], prefix: str) -> None:
    check.keys(firewall, prefix, ("ports", "services", "zones"))
    for index, port in enumerate(check.strings(firewall, prefix, "ports")):
        problem = _port_problem(port)
        if problem:
            check.add(f"{prefix}.ports[{index}]", problem)
    services = check.table(firewall, prefix, "services")
    if services is not None:
        check.keys(services, f"{prefix}.services", ("enabled", "disabled"))
        for key in ("enabled", "disabled"):
            check.strings(services, f"{prefix}.services", key)
    for field, zone in check.tables(firewall, prefix, "zones"):
        check.keys(zone, field, ("name", "sources"))
        check.string(zone, field, "name", required=True)
        for index, source in enumerate(check.strings(zone, field, "sources")):
            if not _is_zone_source(source):
                check.add(f"{field}.sources[{index}]", f"{source!r} is not allowed; allowed: "
                          "an IP address, a CIDR network, a MAC address or ipset:NAME")


def _port_problem(port: str) -> str | None:
    match = PORT_RE.match(port)
    if match is None:
        return (f"{port!r} is not allowed; allowed: PORT:PROTOCOL or FIRST-LAST:PROTOCOL with "
                "protocol tcp, udp, sctp or dccp, e.g. 6443:tcp or 30000-32767:udp")
    first, last = match.group("first"), match.group("last")
    numbers = [int(n) for n in (first, last) if n and n.isdigit()]
    if any(not 1 <= n <= 65535 for n in numbers):
        return f"{port!r}: ports are 1 to 65535"
    if last and not first.isdigit():
        return f"{port!r}: a range needs numeric ports"
    if last and int(first) > int(last):
        return f"{port!r}: the range starts after it ends"
    return None


def _is_zone_source(source: str) -> bool:
    if source.startswith("ipset:") and len(source) > len("ipset:"):
        return True
    if MAC_RE.match(source):
        return True
    try:
        ipaddress.ip_network(source, strict=False)
    except ValueError:
        return False
    return True


def _fs_nodes(check: _Checker, custom: dict[str, Any]) -> None:
    """files and directories: each node's own rules, then duplicates and parents."""
    nodes: dict[str, tuple[str, str]] = {}  # path -> (field, "file" | "directory")
    for kind, key, policy, rule in (("directory", "directories", OSTREE_DIR_POLICY, DIR_RULE),
                                    ("file", "files", OSTREE_FILE_POLICY, FILE_RULE)):
        for field, entry in check.tables(custom, "customizations", key):
            path = _fs_node(check, entry, field, kind)
            if path is None:
                continue
            if not policy_allows(path, policy):
                check.add(f"{field}.path", f"{path} is not allowed: {key} are {rule}")
            if path in nodes:
                check.add(f"{field}.path", f"duplicate path {path} "
                                           f"(also {nodes[path][0]}.path)")
                continue
            nodes[path] = (field, kind)
    for path, (field, _kind) in nodes.items():
        parent = path.rsplit("/", 1)[0]
        while parent:
            owner = nodes.get(parent)
            if owner is not None and owner[1] == "file":
                check.add(f"{field}.path", f"{path} is below {parent}, which {owner[0]} "
                                           "creates as a file; parents must be directories")
            parent = parent.rsplit("/", 1)[0]


def _fs_node(check: _Checker, entry: dict[str, Any], field: str, kind: str) -> str | None:
    own = ("data", "uri") if kind == "file" else ("ensure_parents",)
    check.keys(entry, field, ("path", "user", "group", "mode", *own))
    path = check.string(entry, field, "path", required=True)
    problem = None if path is None else _path_problem(path)
    if problem:
        check.add(f"{field}.path", problem)
    mode = check.string(entry, field, "mode")
    if mode is not None and not MODE_RE.match(mode):
        check.add(f"{field}.mode", f"{mode!r} is not allowed; allowed: an octal mode as a "
                                   "string, e.g. \"0644\"")
    for key, pattern in (("user", USER_RE), ("group", GROUP_RE)):
        _owner(check, entry, field, key, pattern)
    if kind == "file":
        check.string(entry, field, "data")
        uri = check.string(entry, field, "uri")
        if uri is not None and "data" in entry:
            check.add(f"{field}.uri", "data and uri are exclusive: give the contents one way")
        if uri is not None and not re.match(r"^file:///", uri):
            check.add(f"{field}.uri", f"{uri!r} is not allowed; allowed: file:///ABSOLUTE/PATH")
    else:
        check.boolean(entry, field, "ensure_parents")
    return None if problem or path is None else path


def _path_problem(path: str) -> str | None:
    if not path:
        return "must not be empty"
    if not path.startswith("/"):
        return f"{path!r} must be absolute"
    if path != "/" and path.endswith("/"):
        return f"{path!r} must not end with a slash"
    if path != go_clean(path):
        return f"{path!r} must be canonical ({go_clean(path)})"
    return None


def _owner(check: _Checker, entry: dict[str, Any], field: str, key: str,
           pattern: re.Pattern[str]) -> None:
    value = entry.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, str | int):
        check.add(f"{field}.{key}", f"expected a name or a numeric id, got {value!r}")
    elif isinstance(value, int) and value < 0:
        check.add(f"{field}.{key}", f"id {value} must not be negative")
    elif isinstance(value, str) and not pattern.match(value):
        check.add(f"{field}.{key}", f"{value!r} is not a valid {key} name; allowed: "
                                    f"{pattern.pattern}")


class _Checker:
    """Typed access to parsed TOML that records a violation instead of raising."""

    def __init__(self) -> None:
        self.violations: list[Violation] = []

    def add(self, field: str, problem: str) -> None:
        self.violations.append(Violation(field, problem))

    @staticmethod
    def _at(prefix: str, key: str) -> str:
        return f"{prefix}.{key_text(key)}" if prefix else key_text(key)

    def keys(self, table: dict[str, Any], prefix: str, allowed: tuple[str, ...]) -> None:
        for key in table:
            if key not in allowed:
                guess = closest(key, allowed)
                meant = f" did you mean `{guess}`?" if guess is not None else ""
                self.add(self._at(prefix, key),
                         f"unknown field;{meant} allowed: " + ", ".join(allowed))

    def _typed(self, table: dict[str, Any], prefix: str, key: str, *,
               ok: Callable[[Any], bool], what: str, required: bool = False) -> Any:
        if key not in table:
            if required:
                self.add(self._at(prefix, key), "is required")
            return None
        value = table[key]
        if not ok(value):
            self.add(self._at(prefix, key), f"expected {what}, got {value!r}")
            return None
        return value

    def string(self, table: dict[str, Any], prefix: str, key: str, *,
               required: bool = False) -> str | None:
        value = self._typed(table, prefix, key, ok=lambda v: isinstance(v, str),
                            what="a string", required=required)
        if required and value == "":
            self.add(self._at(prefix, key), "must not be empty")
            return None
        return value  # type: ignore[no-any-return]

    def boolean(self, table: dict[str, Any], prefix: str, key: str) -> bool | None:
        return self._typed(table, prefix, key,  # type: ignore[no-any-return]
                           ok=lambda v: isinstance(v, bool), what="true or false")

    def table(self, table: dict[str, Any], prefix: str, key: str) -> dict[str, Any] | None:
        return self._typed(table, prefix, key,  # type: ignore[no-any-return]
                           ok=lambda v: isinstance(v, dict), what="a table")

    def strings(self, table: dict[str, Any], prefix: str, key: str) -> list[str]:
        value = self._typed(table, prefix, key, ok=lambda v: isinstance(v, list), what="a list")
        result = []
        for index, item in enumerate(value or []):
            if isinstance(item, str):
                result.append(item)
            else:
                self.add(f"{self._at(prefix, key)}[{index}]", f"expected a string, got {item!r}")
        return result

    def tables(self, table: dict[str, Any], prefix: str,
               key: str) -> list[tuple[str, dict[str, Any]]]:
        """The entries of an array of tables, each with its TOML path (`files[2]`)."""
        value = self._typed(table, prefix, key, ok=lambda v: isinstance(v, list),
                            what="an array of tables")
        result = []
        for index, item in enumerate(value or []):
            field = f"{self._at(prefix, key)}[{index}]"
            if isinstance(item, dict):
                result.append((field, item))
            else:
                self.add(field, f"expected a table, got {item!r}")
        return result
