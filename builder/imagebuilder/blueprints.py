"""The rendered blueprint on its way to the service: checked, trimmed per image type, synced.

- The blueprint must be the one rendered for the release: its version becomes part of every
  compose's status, and the release version goes into the commit.
- Its [[containers]] are pulled by the service's workers when the compose starts
  (osbuild-composer api.go resolveContainers, 500 ContainerResolveError): an image that
  exists only on this machine (a SAMPLE or a local `source` in release.yaml) is refused here.
- Installers get only what they support (osbuild/images data/distrodefs edge-installer /
  iot-installer `supported_options`); the rest is in the commit they install already.
- Pushing a blueprint whose name exists with the same version makes the service bump its
  patch version (osbuild-composer internal/store/store.go PushBlueprint, go-semver
  BumpPatch: 4.14.2-1 becomes 4.14.3), so an unchanged blueprint is not pushed again and a
  changed one with the same version replaces the old one (delete, then push).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder.core.build_layout import Layout
from builder.core.errors import BuildError, InputError
from builder.core.progress import Progress
from builder.release.model import Image, Release

if TYPE_CHECKING:
    from builder.imagebuilder.client import WeldrClient

# osbuild-composer internal/weldr/api.go ValidBlueprintName
BLUEPRINT_NAME_RE = re.compile(r"^[a-zA-Z0-9._-]+$")
# What edge-installer and iot-installer accept (images data/distrodefs, imagetype.go adds the
# metadata fields name, version and description).
INSTALLER_OPTIONS = ("name", "version", "description", "distro")
INSTALLER_CUSTOMIZATIONS = ("installer", "user", "sshkey", "group", "fips", "timezone",
                            "locale")
LOCAL_TRANSPORTS = ("oci:", "oci-archive:", "docker-archive:", "dir:", "containers-storage:")
INSTALLER_SUFFIX = "-installer"


@dataclass(frozen=True)
class Blueprint:
    name: str
    text: str
    path: Path
    data: dict[str, Any]

    @property
    def version(self) -> str:
        return str(self.data.get("version", ""))


def load_blueprint(build_dir: Path, image: str) -> Blueprint:
    """DIR/blueprints/IMAGE.toml, checked for what the service would refuse first."""
    path = Layout(build_dir).blueprint(image)
    if not path.is_file():
        raise InputError(str(path), "", "blueprint not found; render it first: python -m "
                         f"builder blueprint --image {image} --build-dir {build_dir}")
    text = path.read_text()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(str(path), "", f"not valid TOML: {exc}") from exc
    name = data.get("name")
    if not isinstance(name, str) or not BLUEPRINT_NAME_RE.match(name):
        raise InputError(str(path), "name", f"{name!r} is not a valid blueprint name; allowed: "
                         "letters, digits, '.', '_' and '-'")
    return Blueprint(name=name, text=text, path=path, data=data)


def check_for_release(blueprint: Blueprint, release: Release, build_dir: Path) -> None:
    """Refuse, before any request, what would publish a wrong version or fail on the workers."""
    from builder.blueprint.render import semver_for  # jinja2: loaded only when composing

    expected = semver_for(release.version, release.release)
    if blueprint.version != expected:
        raise InputError(str(blueprint.path), "version", f"{blueprint.version!r} is not this "
                         f"release's ({expected}, {release.path.name} {release.evr}); render it "
                         f"again: python -m builder blueprint --image {blueprint.name} "
                         f"--build-dir {build_dir}")
    by_ref = {image.ref: image for image in release.images()}
    for index, container in enumerate(blueprint.data.get("containers") or []):
        source = str(container.get("source", "")) if isinstance(container, dict) else ""
        image = by_ref.get(source)
        if image is not None and image.source is not None:
            raise _local_image(release, image)
        if source.startswith(LOCAL_TRANSPORTS):
            raise InputError(str(blueprint.path), f"containers[{index}].source",
                             f"{source!r} is on this machine only, and the service's workers "
                             "pull images from a registry: push it there (skopeo copy "
                             f"{source} docker://REGISTRY/NAME:TAG) and name it by digest")


def _local_image(release: Release, image: Image) -> InputError:
    field = f"components.{image.component}.images.{image.name}.source"
    reason = ("SAMPLE images are generated on this machine and are in no registry"
              if image.source == "sample" else f"{image.source} is a file on this machine")
    push = ("push a real image there and set `ref` to it by digest" if image.source == "sample"
            else f"push it there (skopeo copy {image.source} docker://{image.repository}:TAG),"
                 f" keep `ref` at {image.digest}")
    return InputError(str(release.path), field,
                      f"{reason}, but the service's workers pull [[containers]] from a registry "
                      f"when the compose starts (500 ContainerResolveError): {push}, and drop "
                      "`source`")


def installer_view(data: dict[str, Any]) -> dict[str, Any]:
    """The blueprint an installer compose gets: what edge-/iot-installer support, nothing
    more (packages, containers, files, services, firewall are in the commit it installs)."""
    view = {key: value for key, value in data.items() if key in INSTALLER_OPTIONS}
    view["name"] = str(data["name"]) + INSTALLER_SUFFIX
    custom = data.get("customizations")
    if isinstance(custom, dict):
        kept = {k: v for k, v in custom.items() if k in INSTALLER_CUSTOMIZATIONS}
        if kept:
            view["customizations"] = kept
    return view


def left_out(data: dict[str, Any], view: dict[str, Any]) -> list[str]:
    """What installer_view dropped, as option paths (for the progress output)."""
    dropped = [key for key in data if key not in view and key != "customizations"]
    custom = data.get("customizations")
    if isinstance(custom, dict):
        kept = view.get("customizations", {})
        dropped += [f"customizations.{key}" for key in custom if key not in kept]
    return dropped


def _pruned(value: Any) -> Any:
    """Empty values dropped: the service fills in [] and omits empty fields (Go omitempty)."""
    if isinstance(value, dict):
        items = {k: _pruned(v) for k, v in value.items()}
        return {k: v for k, v in items.items() if v not in (None, "", [], {})}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def same_blueprint(stored: dict[str, Any], ours: dict[str, Any]) -> bool:
    return bool(_pruned(stored) == _pruned(ours))


def sync_blueprint(client: WeldrClient, data: dict[str, Any], text: str | None,
                   progress: Progress) -> str:
    """Make the service hold `data` with its own version; returns that version.

    `text` is the TOML as rendered (pushed as is when given), else `data` goes as JSON."""
    name, version = str(data["name"]), str(data.get("version", ""))
    stored = client.blueprint_info(name)
    if stored is not None and same_blueprint(stored, data):
        progress.info(f"blueprint {name} {version}: the service holds it already, not pushed "
                      "again (a push would bump its version)", blueprint=name, version=version)
        return version
    if stored is not None and str(stored.get("version")) == version:
        # Same version, other content: a plain push would store it as a bumped version.
        client.delete_blueprint(name)
    if text is not None:
        client.push_blueprint(text)
    else:
        client.push_blueprint_json(data)
    after = client.blueprint_info(name)
    held = str(after.get("version")) if after is not None else "nothing"
    if held != version:
        raise BuildError(f"composer: the service holds blueprint {name} as version {held}, "
                         f"not {version}; delete it there (composer-cli blueprints delete "
                         f"{name}) and compose again")
    progress.info(f"blueprint {name} {version} pushed", blueprint=name, version=version)
    return version
