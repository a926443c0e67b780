"""What to ask the service for: the image type it offers, the ostree options, the request.

The image types follow osbuild/images data/distrodefs: RHEL 8/9 hosts build `edge-commit`
and `edge-installer`, Fedora hosts `iot-commit` and `iot-installer`, RHEL 10 hosts neither.
The client asks the service (GET /compose/types) and picks the one for the wanted kind.
The ostree rules are osbuild/images pkg/ostree ImageOptions.Validate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from builder.core.errors import BuildError, InputError

KINDS = ("commit", "installer")
OSTREE_FAMILIES = ("edge", "iot")   # RHEL for Edge, Fedora IoT
TYPE_CHOICES = (*KINDS, *(f"{family}-{kind}" for family in OSTREE_FAMILIES for kind in KINDS))
# osbuild/images pkg/ostree verifyRef / verifyChecksum. Go's regexp `\w` is ASCII only, so
# is this one (re.ASCII): a ref with non-ASCII letters is refused here as the service would.
OSTREE_REF_RE = re.compile(r"^(?:[\w\d][-._\w\d]*/)*[\w\d][-._\w\d]*$", re.ASCII)
CHECKSUM_RE = re.compile(r"^[0-9a-f]{64}$")
URL_RE = re.compile(r"^(https?|file)://\S+$")
CLI = "command line"


def kind_of(image_type: str) -> str:
    """'commit' or 'installer' for an edge-*/iot-* image type name."""
    family, _, kind = image_type.partition("-")
    if family not in OSTREE_FAMILIES or kind not in KINDS:
        raise BuildError(f"composer: {image_type!r} is not an ostree commit or installer type "
                         f"this tool imports; use one of: {', '.join(TYPE_CHOICES)}")
    return kind


def choose_image_type(wanted: str, offered: list[str], service: str) -> str:
    """The service's name for `wanted` (a kind, or an image type name it must offer)."""
    listing = ", ".join(offered) if offered else "nothing"
    if wanted in KINDS:
        candidates = [f"{family}-{wanted}" for family in OSTREE_FAMILIES]
        for name in candidates:
            if name in offered:
                return name
        raise BuildError(
            f"composer: the service at {service} offers no ostree {wanted} type "
            f"({' or '.join(candidates)}); it offers: {listing}. RHEL 10 builds neither: use a "
            "RHEL 9 (edge-*) or Fedora (iot-*) service, or compose here with "
            "`python -m builder compose`")
    kind_of(wanted)
    if wanted not in offered:
        other = [f"{family}-{kind_of(wanted)}" for family in OSTREE_FAMILIES]
        raise BuildError(
            f"composer: the service at {service} does not offer {wanted}; it offers: {listing}."
            f" Use --type {kind_of(wanted)} to take whichever of {' or '.join(other)} it has")
    return wanted


@dataclass(frozen=True)
class ComposeOptions:
    """What to build: the kind (or an explicit image type), the ref, and where the workers
    find the commit to build on (`url` + `parent`) or to install (`url`, installers)."""

    image_type: str = "commit"
    ref: str = "rhel/9/x86_64/edge"
    parent: str | None = None
    url: str | None = None

    @property
    def kind(self) -> str:
        return self.image_type if self.image_type in KINDS else kind_of(self.image_type)

    def validate(self) -> None:
        if self.image_type not in TYPE_CHOICES:
            raise InputError(CLI, "--type", f"unknown image type {self.image_type!r}; allowed: "
                             + ", ".join(TYPE_CHOICES))
        if CHECKSUM_RE.match(self.ref):
            raise InputError(CLI, "--ref", f"{self.ref!r} looks like a commit checksum; give a "
                             "ref such as microshift/x86_64/microshift-full")
        if not OSTREE_REF_RE.match(self.ref):
            raise InputError(CLI, "--ref", f"{self.ref!r} is not a valid ostree ref: use "
                             "slash-separated words of ASCII letters, digits, '_', '-' and '.'")
        if self.parent is not None:
            if not (OSTREE_REF_RE.match(self.parent) or CHECKSUM_RE.match(self.parent)):
                raise InputError(CLI, "--parent", f"{self.parent!r} is neither an ostree ref "
                                 "nor a 64-hex commit checksum")
            if not self.url:
                # The service's own rule ("ostree parent ref specified, but no URL to
                # retrieve it"), checked before anything is uploaded.
                raise InputError(CLI, "--parent", "a parent needs --url (the ostree repo "
                                 "that holds it) or --serve-repo")
        if self.kind == "installer" and not self.url:
            raise InputError(CLI, "--url", "an installer needs --url (the ostree repo serving "
                             "the commit to install) or --serve-repo")
        if self.url is not None and not URL_RE.match(self.url):
            raise InputError(CLI, "--url", f"{self.url!r} is not a URL; e.g. "
                             "http://10.0.0.1:8080/repo/")

    def request(self, blueprint: str, image_type: str, *, parent: str | None,
                url: str | None) -> dict[str, Any]:
        """The POST /compose body (osbuild-composer composeHandler ComposeRequest)."""
        ostree = {"ref": self.ref, "parent": parent or "", "url": url or ""}
        return {"blueprint_name": blueprint, "compose_type": image_type, "branch": "master",
                "ostree": ostree}
