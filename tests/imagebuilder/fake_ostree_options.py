"""The fake service's image-options checks, done while it builds the manifest.

Modelled on osbuild/images:
- pkg/distro/generic/options.go checkOptionsCommon: "OSTree is not supported for X" for a
  non-ostree type; distro.ValidateConfig's finding as a *warning* ("blueprint validation
  failed for image type X: packages: not supported"); ostree.ImageOptions.Validate;
  "options validation failed for image type X: ostree.url: required, there is no default
  available" for an installer without a URL; the ostree custom file/directory policies;
- pkg/ostree/ostree.go Validate, verifyRef, verifyChecksum: the ref regexp is Go's, where
  `\\w` is ASCII only ([0-9A-Za-z_]); "ostree image ref looks like a checksum", "invalid
  ostree image ref", "invalid ostree parent ref or commit", "ostree parent ref specified, but
  no URL to retrieve it", "ostree URL ... is invalid".
api.go composeHandler answers any error here as 400 ManifestCreationFailed.
"""

from __future__ import annotations

import re
from typing import Any

from tests.imagebuilder.fake_blueprint import ostree_policy_problem, unsupported_option
from tests.imagebuilder.fake_distro import Distro, ImageType

OSTREE_REF_RE = re.compile(r"^(?:[\w\d][-._\w\d]*/)*[\w\d][-._\w\d]*$", re.ASCII)
CHECKSUM_RE = re.compile(r"^[0-9a-f]{64}$")
# url.ParseRequestURI: an absolute URL (scheme:...) or an absolute path.
REQUEST_URI_RE = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*:\S+|/\S*)$")


def _validate(ostree: dict[str, Any]) -> str | None:
    """pkg/ostree ImageOptions.Validate."""
    ref, parent, url = (ostree.get(k) or "" for k in ("ref", "parent", "url"))
    if ref:
        if CHECKSUM_RE.match(ref):
            return f'ostree image ref looks like a checksum "{ref}"'
        if not OSTREE_REF_RE.match(ref):
            return f'invalid ostree image ref "{ref}"'
    if parent:
        if not CHECKSUM_RE.match(parent) and not OSTREE_REF_RE.match(parent):
            return f'invalid ostree parent ref or commit "{parent}"'
        if not url:
            return "ostree parent ref specified, but no URL to retrieve it"
    if url and not REQUEST_URI_RE.match(url):
        return f'ostree URL "{url}" is invalid'
    return None


def check_ostree_options(distro: Distro, image_type: ImageType, bp: dict[str, Any],
                         ostree: dict[str, Any] | None) -> tuple[list[str], str | None]:
    """(warnings, the error that fails the manifest or None)."""
    name = image_type.name
    if not image_type.is_ostree and ostree:
        return [], f'OSTree is not supported for "{name}"'
    warnings: list[str] = []
    prefix = f'blueprint validation failed for image type "{name}"'
    if image_type.supported_options:
        finding = unsupported_option(bp, image_type.supported_options)
        if finding:
            warnings.append(f"{prefix}: {finding}")
    if ostree:
        problem = _validate(ostree)
        if problem:
            return warnings, problem
    if image_type.kind == "installer" and not distro.installer_default_url \
            and not (ostree or {}).get("url"):
        return warnings, (f'options validation failed for image type "{name}": ostree.url: '
                          "required, there is no default available")
    if image_type.is_ostree:
        policy = ostree_policy_problem(bp)
        if policy:
            return warnings, f"{prefix}: {policy}"
    return warnings, None
