"""The model of blueprints/profiles.yaml: which components each edge image carries.

`builder.blueprint.render.load_profiles` validates the file against `ProfilesDocument`;
`schemas/profiles.schema.json` is generated from it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, StringConstraints, model_validator

from builder.core.models import Model, refuse
from builder.release.document import ComponentKey

# osbuild-composer's rule for blueprint names (weldr API and osbuild/blueprint).
IMAGE_NAME = r"^[a-zA-Z0-9._-]+$"
DNS_DOMAIN = r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$"
PACKAGE_NAME = r"^[A-Za-z0-9._+-]+$"

ImageName = Annotated[str, StringConstraints(pattern=IMAGE_NAME)]


class PinnedBase(Model):
    """A base OS package pinned to a version glob."""

    name: str = Field(pattern=PACKAGE_NAME, description="an RPM package name")
    version: str = Field(min_length=1, description="a version or a glob, e.g. 1.2.*")


PackageName = Annotated[str, Field(pattern=PACKAGE_NAME, description=(
    "a package built by this project (pinned to the release), or {name, version}"))]


class ProfileSettings(Model):
    """Values written into the image's file customizations."""

    base_domain: str = Field("example.com", pattern=DNS_DOMAIN, description=(
        "a DNS domain in lower case"))
    log_level: Literal["Normal", "Debug", "Trace", "TraceAll"] = "Normal"
    # ovn.yaml `mtu` is a uint32; below IPv6's minimum (1280) OVN's Geneve overlay breaks.
    ovn_mtu: int = Field(1400, ge=1280, le=65535, description="an integer from 1280 to 65535")
    max_boot_attempts: int = Field(3, ge=1, le=100, description="an integer from 1 to 100")


def _settings_form(value: Any) -> Any:
    return {} if value is None else value


Settings = Annotated[ProfileSettings, BeforeValidator(_settings_form)]


class Defaults(Model):
    packages: list[PackageName | PinnedBase] = Field(default_factory=list)
    ref: str = Field("microshift/{arch}/{name}", min_length=1, description=(
        "an ostree ref; {arch} and {name} are replaced"))
    settings: Settings = ProfileSettings()


class ImageProfile(Model):
    description: str = Field(pattern=r"\S", description="what the image is for (not blank)")
    components: list[ComponentKey] = Field(min_length=1, description=(
        "keys of release.yaml components; core is required"))
    packages: list[PackageName | PinnedBase] = Field(default_factory=list)
    ref: str | None = Field(None, min_length=1, description=(
        "an ostree ref; {arch} and {name} are replaced"))
    settings: Settings = ProfileSettings()

    @model_validator(mode="after")
    def _core_once(self) -> ImageProfile:
        if "core" not in self.components:
            raise refuse("must include core (microshift-core)", at="components")
        if len(set(self.components)) != len(self.components):
            raise refuse("lists a component twice", at="components")
        return self


def _profile_form(value: Any) -> Any:
    return {} if value is None else value


class ProfilesDocument(Model):
    """blueprints/profiles.yaml: the image profiles."""

    model_config = {"title": "MicroShift edge builder image profiles (profiles.yaml)"}

    defaults: Defaults | None = None
    images: dict[ImageName, Annotated[ImageProfile, BeforeValidator(_profile_form)]] = Field(
        min_length=1, description="image names: letters, digits, '.', '_' and '-'")
