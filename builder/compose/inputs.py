"""What a compose reads: the rendered blueprint (NAME.toml) and its depsolved lock for the
architecture being composed (NAME.ARCH.lock.json).

Both are written by `python -m builder blueprint` into DIR/blueprints/. The blueprint follows
osbuild/blueprint (pkg/blueprint): [[packages]], [[containers]] {source, name, tls-verify},
[customizations] services {enabled, disabled}, firewall {ports, zones [{name, sources}]},
[[customizations.files]] {path, mode, user, group, data}. The lock names every RPM to
install, exactly: name, epoch, version, release, arch, sha256, and where the file is
(`path`, absolute or relative to the lock file, or `repo` + `href` resolved through the
lock's `repos` table of local repository directories).
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.blueprint.target import target_paths
from builder.core.build_layout import Layout
from builder.core.errors import InputError

# osbuild/images policies.OstreeCustomFilesPolicies: where an ostree image takes files.
OSTREE_FILE_PREFIXES = ("/etc/", "/root/", "/usr/local/bin/", "/usr/local/sbin/")
OSTREE_FILE_DENIED = ("/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow", "/etc/fstab")
UNIT_RE = re.compile(r"^[A-Za-z0-9:_.\\@-]+\.(service|socket|timer|target|path|mount)$")
PORT_RE = re.compile(r"^(?P<ports>\d{1,5}(?:-\d{1,5})?):(?P<proto>tcp|udp|sctp|dccp)$")


@dataclass(frozen=True)
class PackageFile:
    """A package of the lock file (builder.blueprint.depsolve.LockedPackage wrote it) as the
    compose installs it: the RPM file on disk, or the URL it is downloaded from into `path`,
    and the sha256 it must have."""

    name: str
    epoch: int
    version: str
    release: str
    arch: str
    path: Path          # for a URL repository: where the download goes (see fetch_packages)
    sha256: str | None
    url: str | None = None

    @property
    def nevra(self) -> str:
        epoch = f"{self.epoch}:" if self.epoch else ""
        return f"{self.name}-{epoch}{self.version}-{self.release}.{self.arch}"


@dataclass(frozen=True)
class ContainerSpec:
    source: str       # what to copy from: a digest-pinned registry reference
    name: str         # the name it gets in containers-storage
    tls_verify: bool = True


@dataclass(frozen=True)
class FileSpec:
    path: str
    data: bytes
    mode: int = 0o644
    user: str | int = "root"
    group: str | int = "root"


@dataclass(frozen=True)
class FirewallZone:
    name: str
    sources: tuple[str, ...]


@dataclass(frozen=True)
class Customizations:
    services_enabled: tuple[str, ...] = ()
    services_disabled: tuple[str, ...] = ()
    ports: tuple[str, ...] = ()
    zones: tuple[FirewallZone, ...] = ()
    files: tuple[FileSpec, ...] = ()


@dataclass(frozen=True)
class ComposeInputs:
    name: str
    version: str
    blueprint_path: Path
    lock_path: Path
    packages: tuple[PackageFile, ...]
    containers: tuple[ContainerSpec, ...]
    customizations: Customizations
    ref: str | None = None  # the profile's ref template, when the lock carries one


def load_compose_inputs(build_dir: Path, image: str, arch: str,
                        release_evr: str | None = None) -> ComposeInputs:
    """Read DIR/blueprints/IMAGE.toml and IMAGE.ARCH.lock.json; with `release_evr`, refuse a
    lock rendered for another release (its RPMs would be composed under the wrong version)."""
    toml_path, lock_path = target_paths(build_dir, image, arch)
    for path in (toml_path, lock_path):
        if not path.is_file():
            raise InputError(str(path), "", "not found",
                             hint=f"run `python -m builder blueprint --image {image} "
                                  f"--build-dir {build_dir}` first")
    blueprint = _load_toml(toml_path)
    lock = _load_json(lock_path)
    locked_for = lock.get("release")
    if release_evr is not None and locked_for is not None and locked_for != release_evr:
        raise InputError(str(lock_path), "release",
                         f"the lock was made for release {locked_for}, release.yaml is "
                         f"{release_evr}", hint=f"run `python -m builder blueprint --image "
                         f"{image} --build-dir {build_dir}` again")
    name = _str(blueprint, "name", toml_path)
    if name != image:
        raise InputError(str(toml_path), "name", f"is {name!r}, expected {image!r}")
    if lock.get("arch", arch) != arch:
        raise InputError(str(lock_path), "arch", f"is {lock.get('arch')!r}, expected {arch!r}",
                         hint=f"run `python -m builder blueprint --image {image} "
                              f"--build-dir {build_dir}` again")
    custom = blueprint.get("customizations", {})
    ref = lock.get("ref")
    return ComposeInputs(
        name=name,
        version=_str(blueprint, "version", toml_path),
        blueprint_path=toml_path,
        lock_path=lock_path,
        packages=_packages(lock, lock_path, Layout(build_dir).cache("rpms")),
        containers=tuple(_container(item, toml_path, i)
                         for i, item in enumerate(blueprint.get("containers", []))),
        customizations=_customizations(custom, toml_path),
        ref=ref if isinstance(ref, str) and ref else None,
    )


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise InputError(str(path), "", f"not valid TOML: {exc}") from exc


def _load_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise InputError(str(path), "", f"not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InputError(str(path), "", "expected a JSON object at the top level")
    return data


def _str(table: dict[str, Any], key: str, path: Path, where: str = "") -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value:
        raise InputError(str(path), f"{where}{key}", f"must be a non-empty string, got {value!r}")
    return value


def _packages(lock: dict[str, Any], lock_path: Path, rpm_cache: Path
              ) -> tuple[PackageFile, ...]:
    """The lock's packages; those from URL repositories point into `rpm_cache`."""
    items = lock.get("packages")
    if not isinstance(items, list):
        raise InputError(str(lock_path), "packages", "must be a list of locked packages")
    repos = lock.get("repos", {})
    packages = []
    for index, item in enumerate(items):
        where = f"packages[{index}]."
        if not isinstance(item, dict):
            raise InputError(str(lock_path), f"packages[{index}]", "must be an object")
        epoch = item.get("epoch", 0)
        if not isinstance(epoch, int) and not (isinstance(epoch, str) and epoch.isdigit()):
            raise InputError(str(lock_path), f"{where}epoch", f"must be an integer, got {epoch!r}")
        packages.append(PackageFile(
            name=_str(item, "name", lock_path, where),
            epoch=int(epoch),
            version=_str(item, "version", lock_path, where),
            release=_str(item, "release", lock_path, where),
            arch=_str(item, "arch", lock_path, where),
            sha256=_sha256(item, lock_path, where),
            **_package_location(item, repos, lock_path, rpm_cache, where),
        ))
    return tuple(packages)


def _sha256(item: dict[str, Any], lock_path: Path, where: str) -> str:
    value = item.get("sha256") or str(item.get("checksum", "")).removeprefix("sha256:")
    if not re.fullmatch(r"[0-9a-f]{64}", value or ""):
        raise InputError(str(lock_path), f"{where}sha256", "must be the RPM's sha256 (64 hex)",
                         hint="re-run `python -m builder blueprint`")
    return value


def _package_location(item: dict[str, Any], repos: Any, lock_path: Path, rpm_cache: Path,
                      where: str) -> dict[str, Any]:
    """`path` (relative to the lock), or `repo` + `location` resolved through `repos`."""
    if isinstance(item.get("path"), str):
        return {"path": (lock_path.parent / item["path"]).resolve()}
    href = item.get("location") or item.get("href")
    entry = repos.get(item.get("repo")) if isinstance(repos, dict) else None
    if not isinstance(href, str) or not isinstance(entry, dict):
        raise InputError(str(lock_path), f"{where}location",
                         "needs `path`, or `repo` + `location` with the repo in `repos`")
    if isinstance(entry.get("url"), str):
        return {"path": rpm_cache / Path(href).name, "url": entry["url"].rstrip("/") + "/" + href}
    if not isinstance(entry.get("path"), str):
        raise InputError(str(lock_path), f"repos.{item.get('repo')}", "needs `path` or `url`")
    return {"path": (lock_path.parent / entry["path"] / href).resolve()}


def _container(item: Any, path: Path, index: int) -> ContainerSpec:
    where = f"containers[{index}]."
    if not isinstance(item, dict):
        raise InputError(str(path), f"containers[{index}]", "must be a table")
    source = _str(item, "source", path, where)
    if "@sha256:" not in source:
        raise InputError(str(path), f"{where}source", f"{source!r} is not pinned by digest",
                         hint="embedded images must be REPOSITORY@sha256:DIGEST")
    name = item.get("name") or source
    return ContainerSpec(source=source, name=str(name), tls_verify=item.get("tls-verify", True))


def _customizations(custom: dict[str, Any], path: Path) -> Customizations:
    services = custom.get("services", {})
    firewall = custom.get("firewall", {})
    enabled = tuple(services.get("enabled", []))
    disabled = tuple(services.get("disabled", []))
    for unit in (*enabled, *disabled):
        if not UNIT_RE.match(unit):
            raise InputError(str(path), "customizations.services",
                             f"{unit!r} is not a systemd unit name (e.g. microshift.service)")
    ports = tuple(firewall.get("ports", []))
    for port in ports:
        if not PORT_RE.match(port):
            raise InputError(str(path), "customizations.firewall.ports",
                             f"{port!r} is not PORT:PROTOCOL or FIRST-LAST:PROTOCOL")
    zones = tuple(FirewallZone(str(z.get("name", "")), tuple(z.get("sources", [])))
                  for z in firewall.get("zones", []))
    files = tuple(_file(item, path, i) for i, item in enumerate(custom.get("files", [])))
    return Customizations(enabled, disabled, ports, zones, files)


def _file(item: dict[str, Any], path: Path, index: int) -> FileSpec:
    where = f"customizations.files[{index}]"
    target = _str(item, "path", path, f"{where}.")
    if (not target.startswith(OSTREE_FILE_PREFIXES) or target in OSTREE_FILE_DENIED
            or "/../" in target or target.endswith("/")):
        raise InputError(str(path), f"{where}.path", f"{target!r} is not allowed in an ostree "
                         "image; allowed: files under /etc, /root, /usr/local/bin, "
                         "/usr/local/sbin (not passwd, shadow, group, gshadow, fstab)")
    mode_text = str(item.get("mode", "0644"))
    if not re.fullmatch(r"0?[0-7]{3,4}", mode_text):
        raise InputError(str(path), f"{where}.mode", f"{mode_text!r} is not an octal mode")
    data = item.get("data", "")
    if not isinstance(data, str):
        raise InputError(str(path), f"{where}.data", "must be a string")
    return FileSpec(path=target, data=data.encode(), mode=int(mode_text, 8),
                    user=item.get("user", "root"), group=item.get("group", "root"))
