"""How the fake service decodes, checks and stores a pushed blueprint.

Modelled on:
- osbuild/blueprint pkg/blueprint/blueprint.go: the `Blueprint` struct (its fields, in order,
  are what a push keeps: unknown TOML/JSON keys are dropped, wrong types are a decode
  error), `Initialize` (default lists, version "0.0.0", semver check "Invalid 'version',
  must use Semantic Versioning: ...", "All package entries need to contain the name of the
  package. Entry #N has no name.") and `BumpVersion` (coreos/go-semver BumpPatch: patch + 1,
  pre-release and metadata dropped, so 4.14.2-1 becomes 4.14.3);
- pkg/blueprint/customizations.go: the `Customizations` struct, field order included;
- pkg/blueprint/fsnode_customizations.go: FileCustomization/DirectoryCustomization
  UnmarshalTOML ("UnmarshalTOML: path must be a string", ...), validateModeString, "cannot
  specify both data ... and URI", and images pkg/customizations/fsnode validate() (absolute,
  canonical paths; user and group names or non-negative ids);
- osbuild/images pkg/distro/validator.go validateSupportedConfig: the first option that is
  set and not in the image type's supported list, reported as "PATH: not supported";
- osbuild/images pkg/policies OstreeCustomFilesPolicies / OstreeCustomDirectoriesPolicies
  with blueprint.CheckFileCustomizationsPolicy's message.

Decode errors are approximations of Go's (BurntSushi/toml and encoding/json); the tests and
the client rely only on the error id, the status code and the key named in the message.
"""

from __future__ import annotations

import json
import posixpath
import re
import tomllib
from collections.abc import Callable
from typing import Any

# coreos/go-semver: MAJOR.MINOR.PATCH[-PRERELEASE][+METADATA], identifiers [0-9A-Za-z-].
SEMVER_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
                       r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$")
MODE_RE = re.compile(r"^0?[0-7]{3}$")
USER_RE = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,31}$")
GROUP_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,31}$")
STR, BOOL, INT, ANY = "string", "bool", "int", "any"


class DecodeError(Exception):
    pass


Check = Callable[[Any, str], None]


def _fsnode(value: Any, where: str, *, is_file: bool) -> None:
    """FileCustomization/DirectoryCustomization UnmarshalTOML + fsnode validate()."""
    if not isinstance(value, dict):
        raise DecodeError(f"{where}: expected a table")
    if not isinstance(value.get("path"), str):
        raise DecodeError("UnmarshalTOML: path must be a string")
    for key, kinds in (("user", (str, int)), ("group", (str, int)), ("mode", (str,)),
                       ("data", (str,)), ("uri", (str,)), ("ensure_parents", (bool,))):
        item = value.get(key)
        if item is not None and (not isinstance(item, kinds) or
                                 (isinstance(item, bool) and bool not in kinds)):
            raise DecodeError(f"UnmarshalTOML: {key} must be a "
                              + " or an ".join("string" if k is str else k.__name__
                                               for k in kinds))
    _fsnode_values(value, is_file=is_file)


def _fsnode_values(value: dict[str, Any], *, is_file: bool) -> None:
    """images pkg/customizations/fsnode validate() and blueprint validateModeString."""
    path = value["path"]
    if not path:
        raise DecodeError("path must not be empty")
    if not path.startswith("/"):
        raise DecodeError("path must be absolute")
    if path.endswith("/"):
        raise DecodeError("path must not end with a slash")
    if posixpath.normpath(path) != path:
        raise DecodeError("path must be canonical")
    mode = value.get("mode")
    if mode is not None and not MODE_RE.match(mode):
        raise DecodeError(f"invalid mode {mode}: must be an octal number")
    for key, pattern in (("user", USER_RE), ("group", GROUP_RE)):
        owner = value.get(key)
        if isinstance(owner, str) and not pattern.match(owner):
            raise DecodeError(f"{key} name {owner!r} doesn't conform to validating regex "
                              f"({pattern.pattern})")
        if isinstance(owner, int) and owner < 0:
            raise DecodeError(f"{key} ID must be non-negative")
    if is_file and value.get("data") and value.get("uri"):
        raise DecodeError(f"cannot specify both data {value['data']!r} and URI {value['uri']!r}")


def _file(value: Any, where: str) -> None:
    _fsnode(value, where, is_file=True)


def _directory(value: Any, where: str) -> None:
    _fsnode(value, where, is_file=False)


PACKAGE = {"name": STR, "version": STR}
STRINGS = [STR]
# pkg/blueprint/customizations.go Customizations, in field order; the parts this fake does
# not model are taken as they come (ANY), which is lenient.
CUSTOMIZATIONS: dict[str, Any] = {
    "hostname": STR,
    "kernel": {"name": STR, "append": STR},
    "sshkey": [{"user": STR, "key": STR}],
    "user": [{"name": STR, "description": STR, "password": STR, "key": STR, "home": STR,
              "shell": STR, "groups": STRINGS, "uid": INT, "gid": INT, "expiredate": INT,
              "force_password_reset": BOOL}],
    "group": [{"name": STR, "gid": INT}],
    "timezone": {"timezone": STR, "ntpservers": STRINGS},
    "locale": {"languages": STRINGS, "keyboard": STR},
    "firewall": {"ports": STRINGS, "services": {"enabled": STRINGS, "disabled": STRINGS},
                 "zones": [{"name": STR, "sources": STRINGS}]},
    "services": {"enabled": STRINGS, "disabled": STRINGS, "masked": STRINGS},
    "filesystem": ANY, "disk": ANY, "installation_device": STR, "partitioning_mode": STR,
    "fdo": ANY, "openscap": ANY, "ignition": ANY,
    "directories": [_directory],
    "files": [_file],
    "repositories": ANY, "fips": BOOL, "installer": ANY, "rpm": ANY, "rhsm": ANY,
    "cacerts": ANY, "containers-storage": ANY, "firstboot": ANY, "dnf": ANY, "iso": ANY,
    "sshd": ANY,
}
# pkg/blueprint/blueprint.go Blueprint, in field order.
BLUEPRINT: dict[str, Any] = {
    "name": STR, "description": STR, "version": STR,
    "packages": [PACKAGE], "modules": [PACKAGE],
    "enabled_modules": [{"name": STR, "stream": STR}],
    "groups": [{"name": STR}],
    "containers": [{"source": STR, "name": STR, "tls-verify": BOOL, "local-storage": BOOL}],
    "customizations": CUSTOMIZATIONS,
    "distro": STR, "architecture": STR,
}


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    return {int: "int64", float: "float64", str: "string", list: "array",
            dict: "table"}.get(type(value), type(value).__name__)


def _convert(spec: Any, value: Any, where: str) -> Any:
    """`value` decoded into `spec` as Go would: known keys kept, wrong types refused."""
    if spec == ANY:
        return value
    if callable(spec):
        spec(value, where)
        return value
    scalar = {STR: str, INT: int, BOOL: bool}.get(spec) if isinstance(spec, str) else None
    if scalar is not None:
        ok = isinstance(value, scalar) and (scalar is bool or not isinstance(value, bool))
        if not ok:
            raise DecodeError(f"incompatible types: value has type {_type_name(value)}; "
                              f"destination has type {spec} (key {where!r})")
        return value
    if isinstance(spec, list):
        if not isinstance(value, list):
            raise DecodeError(f"incompatible types: value has type {_type_name(value)}; "
                              f"destination has type array (key {where!r})")
        return [_convert(spec[0], item, f"{where}[{i}]") for i, item in enumerate(value)]
    if not isinstance(value, dict):
        raise DecodeError(f"incompatible types: value has type {_type_name(value)}; "
                          f"destination has type struct (key {where!r})")
    return {key: _convert(sub, value[key], f"{where}.{key}" if where else key)
            for key, sub in spec.items() if key in value}


def decode(content_type: str, body: bytes) -> dict[str, Any]:
    """api.go blueprintsNewHandler: TOML for text/x-toml, JSON for application/json."""
    try:
        if content_type == "application/json":
            raw = json.loads(body)
        elif content_type == "text/x-toml":
            raw = tomllib.loads(body.decode())
        else:
            raise DecodeError("blueprint must be in json or toml format")
    except (ValueError, UnicodeDecodeError) as exc:
        raise DecodeError(str(exc)) from exc
    if not isinstance(raw, dict):
        raise DecodeError("a blueprint is a table/object")
    result: dict[str, Any] = _convert(BLUEPRINT, raw, "")
    return result


def initialize(bp: dict[str, Any]) -> None:
    """pkg/blueprint/blueprint.go Blueprint.Initialize (raises DecodeError on a problem)."""
    if not bp.get("name"):
        raise DecodeError("empty blueprint name not allowed")
    for key in ("packages", "modules", "enabled_modules", "groups", "containers"):
        bp.setdefault(key, [])
    if not bp.get("version"):
        bp["version"] = "0.0.0"
    problem = semver_problem(bp["version"])
    if problem:
        raise DecodeError(f"Invalid 'version', must use Semantic Versioning: {problem}")
    for number, pkg in enumerate(bp["packages"], start=1):
        if not pkg.get("name"):
            detail = (f"Entry #{number} has version '{pkg['version']}' but no name."
                      if pkg.get("version") else f"Entry #{number} has no name.")
            raise DecodeError("All package entries need to contain the name of the "
                              f"package. {detail}")


def semver_problem(version: str) -> str | None:
    if SEMVER_RE.match(version):
        return None
    core = re.split(r"[-+]", version, maxsplit=1)[0]
    if len(core.split(".")) != 3:
        return f"{core} is not in dotted-tri format"
    return f"{version} is not a valid semver identifier"


def bump_version(old: str) -> str | None:
    """Blueprint.BumpVersion: go-semver BumpPatch; None when `old` is not semver."""
    match = SEMVER_RE.match(old)
    if match is None:
        return None
    major, minor, patch = (int(part) for part in match.groups()[:3])
    return f"{major}.{minor}.{patch + 1}"


def _is_empty(value: Any) -> bool:
    return value in (None, "", False, 0) or (isinstance(value, list | dict) and not value)


def unsupported_option(bp: dict[str, Any], supported: tuple[str, ...],
                       spec: dict[str, Any] = BLUEPRINT) -> str | None:
    """validator.go validateSupportedConfig: 'PATH: not supported' for the first offender."""
    whole = {key for key in supported if "." not in key}
    nested: dict[str, list[str]] = {}
    for key in supported:
        if "." in key:
            head, rest = key.split(".", 1)
            nested.setdefault(head, []).append(rest)
    for key, sub_spec in spec.items():
        value = bp.get(key)
        if key not in nested:
            if not _is_empty(value) and key not in whole:
                return f"{key}: not supported"
            continue
        if _is_empty(value) or not isinstance(sub_spec, dict | list):
            continue
        items = value if isinstance(value, list) else [value]
        element_spec = sub_spec[0] if isinstance(sub_spec, list) else sub_spec
        if not isinstance(element_spec, dict):
            continue
        for index, item in enumerate(items):
            found = unsupported_option(item, tuple(nested[key]), element_spec)
            if found:
                label = f"{key}[{index}]" if isinstance(value, list) else key
                return f"{label}.{found}"
    return None


def _allowed(path: str, allowed: tuple[str, ...], denied: tuple[str, ...]) -> bool:
    """pathpolicy.Check: the longest matching prefix decides."""
    def under(prefix: str) -> bool:
        return path == prefix or path.startswith(prefix.rstrip("/") + "/")

    best_allow = max((len(p) for p in allowed if under(p)), default=-1)
    best_deny = max((len(p) for p in denied if under(p)), default=-1)
    return best_allow > best_deny


def ostree_policy_problem(bp: dict[str, Any]) -> str | None:
    """OstreeCustomFilesPolicies and OstreeCustomDirectoriesPolicies (images pkg/policies)."""
    custom = bp.get("customizations") or {}
    files = [f["path"] for f in custom.get("files") or []
             if not _allowed(f["path"], ("/etc", "/root", "/usr/local/bin", "/usr/local/sbin"),
                             ("/", "/etc/fstab", "/etc/shadow", "/etc/passwd", "/etc/group"))]
    if files:
        return f"the following custom files are not allowed: {files}"
    dirs = [d["path"] for d in custom.get("directories") or []
            if not _allowed(d["path"], ("/etc",), ("/",))]
    if dirs:
        return f"the following custom directories are not allowed: {dirs}"
    return None
