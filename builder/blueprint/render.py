"""Image profiles (blueprints/profiles.yaml) and their Image Builder blueprints.

`render_blueprint()` turns one profile into blueprint TOML: the chosen components' RPMs pinned
to the release's exact version-release, their container images as `[[containers]]` pinned by
digest, their services, the firewall, and the MicroShift file customizations. Templates live
in blueprints/NAME.toml.j2 and extend blueprints/_microshift.toml.j2.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from builder.blueprint.profiles import (
    Defaults,
    PinnedBase,
    ProfilesDocument,
    ProfileSettings,
)
from builder.core.errors import BuildError, InputError
from builder.core.models import validate
from builder.core.paths import PROJECT_ROOT
from builder.core.schema import load_yaml
from builder.core.templates import environment, render_with
from builder.release.catalog import component
from builder.release.model import Image, Release
from builder.release.ostree_config import substitute_ref

BLUEPRINTS_DIR = PROJECT_ROOT / "blueprints"
PROFILES_FILE = "profiles.yaml"


@dataclass(frozen=True)
class PackageSpec:
    name: str
    version: str | None = None  # None: this project's package, pinned to the release EVR


@dataclass(frozen=True)
class Settings:
    """Values written into the image's file customizations."""

    base_domain: str
    log_level: str
    ovn_mtu: int
    max_boot_attempts: int


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    components: tuple[str, ...]
    packages: tuple[PackageSpec, ...]
    ref_template: str
    settings: Settings
    blueprints_dir: Path

    @property
    def template(self) -> str:
        return f"{self.name}.toml.j2"

    def ref(self, arch: str) -> str:
        """The ostree ref the image's commits go to."""
        return substitute_ref(self.ref_template, arch=arch, image=self.name)


@dataclass(frozen=True)
class PinnedPackage:
    name: str
    version: str  # what goes into the blueprint: an exact version-release or a glob


def load_profiles(blueprints_dir: Path = BLUEPRINTS_DIR) -> dict[str, Profile]:
    """Read profiles.yaml (`ProfilesDocument`); every error names the file and the field."""
    path = blueprints_dir / PROFILES_FILE
    doc = validate(ProfilesDocument, load_yaml(path), str(path))
    defaults = doc.defaults or Defaults()
    profiles: dict[str, Profile] = {}
    for name, image in doc.images.items():
        template = blueprints_dir / f"{name}.toml.j2"
        if not template.is_file():
            raise InputError(str(path), f"images.{name}", f"has no template {template}",
                             hint="create it; it usually only extends _microshift.toml.j2")
        settings = {**defaults.settings.model_dump(exclude_unset=True),
                    **image.settings.model_dump(exclude_unset=True)}
        profiles[name] = Profile(
            name=name, description=" ".join(image.description.split()),
            components=tuple(image.components),
            packages=_packages(defaults.packages) + _packages(image.packages),
            ref_template=image.ref or defaults.ref,
            settings=Settings(**ProfileSettings.model_validate(settings).model_dump()),
            blueprints_dir=blueprints_dir)
    return profiles


def load_profile(name: str, blueprints_dir: Path = BLUEPRINTS_DIR) -> Profile:
    profiles = load_profiles(blueprints_dir)
    if name not in profiles:
        raise InputError(str(blueprints_dir / PROFILES_FILE), "images",
                         f"no image named {name!r}; allowed: {', '.join(sorted(profiles))}")
    return profiles[name]


def _packages(items: list[str | PinnedBase]) -> tuple[PackageSpec, ...]:
    return tuple(PackageSpec(item) if isinstance(item, str)
                 else PackageSpec(item.name, item.version) for item in items)


def semver_for(version: str, release: str) -> str:
    """A blueprint version (semver, as github.com/coreos/go-semver parses it) for an RPM EVR.

    4.14.2 + release 1 -> "4.14.2-1"; missing minor/patch parts become 0, and anything after
    them (e.g. "~rc1") plus the release become dot-separated pre-release identifiers.
    """
    match = re.match(r"^(\d+)(?:\.(\d+))?(?:\.(\d+))?(.*)$", version)
    if match is None:
        raise BuildError(f"release version {version!r} does not start with a number; "
                         "cannot derive the blueprint's semantic version")
    numbers = [str(int(group or 0)) for group in match.groups()[:3]]
    extra = [part for text in (match.group(4), release)
             for part in re.split(r"[^0-9A-Za-z-]+", text) if part]
    return ".".join(numbers) + ("-" + ".".join(extra) if extra else "")


def pinned_packages(release: Release, profile: Profile) -> tuple[PinnedPackage, ...]:
    """The blueprint's [[packages]]: components first, then the profile's extra packages."""
    pinned = [PinnedPackage(component(key).package, release.evr) for key in profile.components]
    pinned += [PinnedPackage(spec.name, spec.version or release.evr) for spec in profile.packages]
    return tuple(pinned)


def profile_images(release: Release, profile: Profile) -> tuple[Image, ...]:
    """Every container image of the profile's components, in release.yaml order."""
    shipped = {comp.key for comp in release.components}
    for key in profile.components:
        if key not in shipped:
            raise InputError(str(profile.blueprints_dir / PROFILES_FILE),
                             f"images.{profile.name}.components",
                             f"component {key!r} is not in {release.path.name}; "
                             f"the release ships: {', '.join(sorted(shipped))}")
    return release.images(profile.components)


# greenboot's units, enabled in every image that carries microshift-greenboot, as osbuild's
# edge image types enable them (their health check and boot counter decide a rollback).
GREENBOOT_SERVICES = ("greenboot-healthcheck.service", "greenboot-task-runner.service",
                      "greenboot-grub2-set-counter.service", "greenboot-grub2-set-success.service",
                      "greenboot-rpm-ostree-grub2-check-fallback.service",
                      "greenboot-status.service", "redboot-auto-reboot.service",
                      "redboot-task-runner.service")
# Pod networks that must reach the host: MicroShift's default IPv4 cluster network and the
# IPv6 one of dual-stack and IPv6 clusters (upstream: fd01::/48).
POD_NETWORKS = ("10.42.0.0/16", "fd01::/48")
OVNK_HOST_GATEWAY = "169.254.169.1"


def services(profile: Profile) -> list[str]:
    names: list[str] = []
    for key in profile.components:
        names += [s for s in component(key).services if s not in names]
    if any(spec.name == "microshift-greenboot" for spec in profile.packages):
        names += [s for s in GREENBOOT_SERVICES if s not in names]
    if any(spec.name == "microshift-update" for spec in profile.packages):
        names += [s for s in component("update").services if s not in names]
    return names


def trusted_sources(profile: Profile) -> list[str]:
    sources = list(POD_NETWORKS)
    if "networking-ovnk" in profile.components:
        sources.append(OVNK_HOST_GATEWAY)
    return sources


def render_blueprint(release: Release, profile: Profile) -> str:
    """The blueprint TOML text of one profile for one release."""
    context = {
        "release": release,
        "name": profile.name,
        "description": profile.description,
        "version": semver_for(release.version, release.release),
        "template": profile.template,
        "components": list(profile.components),
        "packages": pinned_packages(release, profile),
        "containers": profile_images(release, profile),
        "services": services(profile),
        "trusted_sources": trusted_sources(profile),
        "settings": profile.settings,
    }
    return _render(profile.blueprints_dir, profile.template, context)


def _render(search_path: Path, name: str, context: Mapping[str, Any]) -> str:
    env = environment(search_path)
    env.filters["toml"] = toml_value
    env.filters["toml_text"] = toml_text
    return render_with(env, search_path, name, context)


def toml_string(text: str) -> str:
    """A TOML basic string (tomli-w escapes quotes, backslashes and control characters)."""
    return toml_value(text)


def toml_value(value: object) -> str:
    """A Jinja filter: a string, bool, int or list of them as a TOML value (tomli-w)."""
    if not isinstance(value, str | bool | int | list | tuple):
        raise TypeError(f"no TOML form for {type(value).__name__}")
    return tomli_w.dumps({"v": value})[len("v = "):].rstrip("\n")


def toml_text(text: str) -> str:
    """A Jinja filter for file contents: a multi-line string when the text has lines, so the
    blueprint stays readable (tomli-w, `multiline_strings`). A carriage return keeps it a
    one-line string: TOML parsers read a multi-line string's CR LF as LF."""
    return tomli_w.dumps({"v": text}, multiline_strings="\r" not in text)[
        len("v = "):].rstrip("\n")

