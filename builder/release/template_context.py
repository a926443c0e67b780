"""What spec templates and package sources see of the release: versions and a component's images."""

from __future__ import annotations

from typing import Any

from builder.core.errors import InputError
from builder.release.model import Release

PACKAGER = "MicroShift release engineering <microshift-builder@example.invalid>"


class ReleaseImages(dict[str, str]):
    """A component's images by logical name; asking for one release.yaml lacks names the
    field to add (Jinja would only say "'dict object' has no attribute ...")."""

    def __init__(self, release: Release, key: str, images: dict[str, str]) -> None:
        super().__init__(images)
        self.release_path = str(release.path)
        self.key = key

    def __missing__(self, name: str) -> str:
        raise InputError(self.release_path, f"components.{self.key}.images.{name}",
                         "is missing: the component's manifests use this image",
                         hint="add it, pinned by digest (REPOSITORY@sha256:...)")


def component_context(release: Release, key: str) -> dict[str, Any]:
    """What a component's spec and `.j2` sources see."""
    comp = release.component(key)
    return {
        "release": release,
        "version": release.version,
        "rpm_release": release.release,
        "component": key,
        "packager": PACKAGER,
        "images": ReleaseImages(release, key, {img.name: img.ref for img in comp.images}),
        "all_images": {img.name: img.ref for img in release.images()},
    }
