"""The optional `ostree:` section of release.yaml: commit ref, base commit, delta fan-in.

    ostree:
      ref: "rhel/9/{arch}/edge"      # optional; default: the image profile's ref
      base: {sample: true}           # or {repo: PATH_OR_URL, ref: REF[, gpg_key: FILE]}
      deltas_from: 3                 # static deltas from this many previous commits

Without the section a release composes onto the SAMPLE base commit built from the sample
base repository, which is what the offline demo and the tests use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from builder.core.schema import Fields

# osbuild/images pkg/ostree verifyRef: slash-separated words; `{arch}`/`{image}` allowed.
REF_TEMPLATE_RE = re.compile(r"^(?:[\w{}][-._\w{}]*/)*[\w{}][-._\w{}]*$")
DEFAULT_REF = "rhel/9/{arch}/edge"
PLACEHOLDERS = ("{arch}", "{image}")


@dataclass(frozen=True)
class OstreeBase:
    """Where the base commit comes from: the sample, a local repo path or an HTTP(S) URL."""

    kind: str          # "sample" | "path" | "url"
    location: str = ""
    ref: str = ""
    gpg_key: str | None = None  # public key file to verify a URL base with

    @property
    def is_sample(self) -> bool:
        return self.kind == "sample"


@dataclass(frozen=True)
class OstreeSettings:
    ref: str | None = None
    base: OstreeBase = field(default_factory=lambda: OstreeBase("sample"))
    deltas_from: int = 3

    def ref_for(self, arch: str, image: str, profile_ref: str | None = None) -> str:
        """The ref an image's commits go to: release.yaml, else the profile's, else default."""
        template = self.ref or profile_ref or DEFAULT_REF
        return template.replace("{arch}", arch).replace("{image}", image).replace(
            "{name}", image)


def parse_ostree(fields: Fields | None, root: Path) -> OstreeSettings:
    if fields is None:
        return OstreeSettings()
    ref = fields.get("ref", str)
    if ref is not None:
        fields.check("ref", ref, REF_TEMPLATE_RE.match,
                     "slash-separated words, optionally with {arch} and {image}, "
                     "e.g. rhel/9/{arch}/edge")
    deltas_from = fields.get("deltas_from", int, 3)
    fields.check("deltas_from", deltas_from, lambda n: 0 <= n <= 50, "an integer from 0 to 50")
    base_fields = fields.child("base")
    base = _base(base_fields, root) if base_fields else OstreeBase("sample")
    fields.close()
    return OstreeSettings(ref=ref, base=base, deltas_from=deltas_from)


def _base(fields: Fields, root: Path) -> OstreeBase:
    if fields.get("sample", bool, False):
        fields.close()
        return OstreeBase("sample")
    repo = fields.get("repo", str)
    if repo is None:
        raise fields.error("repo", "give `sample: true` or `repo: PATH_OR_URL` with `ref: REF`")
    ref = fields.get("ref", str, required=True)
    fields.check("ref", ref, REF_TEMPLATE_RE.match, "an ostree ref such as rhel/9/x86_64/edge")
    gpg_key = fields.get("gpg_key", str)
    if gpg_key is not None:
        key_path = (root / gpg_key).resolve()
        if not key_path.is_file():
            raise fields.error("gpg_key", f"{key_path} does not exist")
        gpg_key = str(key_path)
    fields.close()
    if repo.startswith(("http://", "https://")):
        return OstreeBase("url", repo, ref, gpg_key)
    location = (root / repo).resolve()
    if not (location / "config").is_file():
        raise fields.error("repo", f"{location} is not an ostree repository (no config file)",
                           hint="give the repository directory, or an http(s):// URL")
    return OstreeBase("path", str(location), ref, gpg_key)
