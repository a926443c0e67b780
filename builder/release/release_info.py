"""Files generated from the release for its packages: microshift-release-info's image lists.

Upstream MicroShift ships assets/release/release-ARCH.json in its `microshift-release-info`
package (/usr/share/microshift/release/): `{"release": {"base": VERSION}, "images": {NAME:
REF}}`, every image the release runs, pinned by digest. Tools read it to embed the images
into blueprints (`jq -r '.images[]' release-x86_64.json`), so this project writes the same
format from release.yaml: one file per target architecture.
"""

from __future__ import annotations

import json

from builder.release.model import Release

RELEASE_INFO_DIR = "usr/share/microshift/release"


def release_info(release: Release, arch: str) -> dict[str, object]:
    """release-ARCH.json: every image of every component, sorted by name, so the file
    depends on the images only, not on how release.yaml orders them."""
    del arch  # images are not per-architecture yet; their refs may name manifest lists
    images: dict[str, str] = {}
    for image in release.images():
        images.setdefault(image.name, image.ref)  # a name means one image (release model)
    return {"release": {"base": release.version}, "images": dict(sorted(images.items()))}


def release_info_files(release: Release) -> dict[str, bytes]:
    # Every architecture of release.yaml, even in a run narrowed to one (--arch): the noarch
    # package must be the same whichever job of a CI matrix builds it.
    return {f"{RELEASE_INFO_DIR}/release-{arch}.json":
            (json.dumps(release_info(release, arch), indent=2) + "\n").encode()
            for arch in release.declared_architectures}


def generated_files(release: Release, key: str) -> dict[str, bytes]:
    """Files a component's package gets besides its specs/sources/ tree, by path."""
    if key == "release-info":
        return release_info_files(release)
    return {}
