"""What an image-mode device reads before it downloads: the signed index's image part and
the device's container signature policy.

The index is the one ostree devices read (builder/updater/index.py: the same format, signed
and vouched current by the same statement, rollout waves included), published under the
image's own ref with `to_commit` the new image's manifest digest (hex) and an `image` part:

    "image": {"reference": "REGISTRY/NAMESPACE/NAME", "manifest": "sha256:...",
              "deltas": [{"file": "FROM-TO.oci-delta.tar", "from_manifest": "sha256:...",
                          "bytes": N, "sha256": HEX}]}

The policy is containers-policy.json(5), as bootc and podman read it
(/etc/containers/policy.json): the requirements of the most specific scope of the image's
reference under `transports.docker`, else `default`. `reject` refuses the image;
`insecureAcceptAnything` accepts it; `signedBy` (GPGKeys) accepts it only when the signed
index that names its manifest digest verifies with that requirement's `keyPath`: the key
vouches for the digest through the index instead of a simple-signing signature.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from builder.core.bounded_json import BadDocument, Doc
from builder.updater.index import (
    CHECKSUM,
    INDEX_FORMAT,
    DeltaFile,
    Index,
    UpdateRefused,
    index_target,
    load_document,
)

POLICY = Path("etc/containers/policy.json")
DELTA_NAME = re.compile(r"^[0-9a-f]{64}-[0-9a-f]{64}\.oci-delta\.tar$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
REFERENCE = re.compile(r"^[a-z0-9][a-z0-9.:-]*(/[a-z0-9][a-z0-9._-]*)+$")
MAX_POLICY = 256 * 1024


@dataclass(frozen=True)
class ImageIndex:
    index: Index              # ref, to_commit (the manifest's hex), to_version
    reference: str
    manifest: str             # sha256:...
    deltas: tuple[DeltaFile, ...]   # from_commit/to_commit: manifest digests' hex

    def delta_from(self, manifest: str) -> DeltaFile | None:
        hexdigest = manifest[len("sha256:"):]
        return next((d for d in self.deltas if d.from_commit == hexdigest), None)


def parse_image_index(data: bytes, ref: str, what: str) -> ImageIndex:
    doc = load_document(data, INDEX_FORMAT, what)
    try:
        to_commit, version = index_target(doc, ref, what, "a manifest digest's hex")
        image = doc.child("image")
        assert image is not None
        reference = image.text("reference", pattern=REFERENCE,
                               allowed="REGISTRY/NAMESPACE/NAME, lower case")
        image.equals("manifest", "sha256:" + to_commit, f"sha256:{to_commit[:12]}... "
                     "(the index's to_commit)")
        deltas = tuple(_delta(Doc(entry, what, f"image.deltas[{n}]"), to_commit, what)
                       for n, entry in enumerate(image.array("deltas", max_items=64)))
    except BadDocument as exc:
        raise UpdateRefused(str(exc)) from None
    return ImageIndex(Index(ref, to_commit, version, ()), reference, "sha256:" + to_commit,
                      deltas)


def _delta(doc: Doc, to_commit: str, what: str) -> DeltaFile:
    name = doc.text("file", pattern=DELTA_NAME, allowed="FROM-TO.oci-delta.tar")
    source = doc.text("from_manifest", pattern=DIGEST, allowed="sha256:<64 hex>")
    size = doc.integer("bytes", 1, 2 ** 50)
    digest = doc.text("sha256", pattern=CHECKSUM, allowed="a sha256 (64 hex digits)")
    expected = f"{source[len('sha256:'):]}-{to_commit}.oci-delta.tar"
    if name != expected:
        raise UpdateRefused(f"{what}: file {name!r} should be named {expected}")
    return DeltaFile(name, source[len("sha256:"):], to_commit, size, digest)


def policy_keys(root: Path, reference: str) -> list[Path]:
    """The keys the policy accepts `reference`'s images by; refused when it rejects them.
    An empty list: insecureAcceptAnything (the index's own keys then decide)."""
    path = root / POLICY
    try:
        data = path.read_bytes()[:MAX_POLICY + 1]
        policy = json.loads(data) if len(data) <= MAX_POLICY else None
    except (OSError, ValueError) as exc:
        raise UpdateRefused(f"{path}: not a readable policy ({exc})",
                            hint="ship the release's policy.json (DIR/bootc/device/)") from None
    if not isinstance(policy, dict):
        raise UpdateRefused(f"{path}: not a JSON object; allowed: containers-policy.json(5)")
    scopes = (policy.get("transports") or {}).get("docker") or {}
    scope = next((s for s in _scopes(reference) if s in scopes), None)
    requirements = scopes[scope] if scope is not None else policy.get("default")
    if not isinstance(requirements, list) or not requirements:
        raise UpdateRefused(f"{path}: no requirements for {reference}; allowed: a list")
    keys: list[Path] = []
    for requirement in requirements:
        kind = requirement.get("type") if isinstance(requirement, dict) else None
        if kind == "reject":
            raise UpdateRefused(f"{reference} is outside the policy: {path} rejects it "
                                f"({'scope ' + scope if scope else 'default'})",
                                hint="nothing was downloaded; the device keeps its image")
        if kind == "signedBy" and requirement.get("keyType") == "GPGKeys" and \
                isinstance(requirement.get("keyPath"), str):
            keys.append(root / requirement["keyPath"].lstrip("/"))
        elif kind != "insecureAcceptAnything":
            raise UpdateRefused(f"{path}: requirement {str(kind)[:40]!r} for {reference} is "
                                "not supported; allowed: reject, insecureAcceptAnything, "
                                "signedBy with keyType GPGKeys and keyPath")
    return keys


def _scopes(reference: str) -> list[str]:
    """containers-policy.json(5)'s docker scopes, most specific first: the repository, each
    namespace above it, the registry host."""
    parts = reference.split("/")
    return ["/".join(parts[:n]) for n in range(len(parts), 0, -1)]
