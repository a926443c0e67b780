"""The optional `ostree:` section of release.yaml: commit ref, base commit, delta fan-in.

    ostree:
      ref: "rhel/9/{arch}/edge"      # optional; default: the image profile's ref
      base: {sample: true}           # or {repo: PATH_OR_URL, ref: REF[, gpg_key: FILE]}
      deltas_from: 3                 # static deltas from this many previous commits

Without the section a release composes onto the SAMPLE base commit built from the sample
base repository, which is what the offline demo and the tests use. The section's shape is
`builder.release.document.Ostree`; this module checks what a schema cannot (the files exist).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.core.errors import InputError
from builder.core.models import validate
from builder.release import document

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
        return substitute_ref(self.ref or profile_ref or DEFAULT_REF, arch=arch, image=image)


def substitute_ref(template: str, *, arch: str, image: str) -> str:
    """The one place a ref template becomes a ref: `{arch}` and `{image}` (profiles.yaml's
    `{name}` too) filled in. Applying it to a ref it made gives that ref again."""
    return template.replace("{arch}", arch).replace("{image}", image).replace("{name}", image)


def parse_ostree(data: Any, root: Path, file: str = "release.yaml") -> OstreeSettings:
    """The `ostree:` mapping of `file` (already parsed YAML, or None for no section)."""
    if data is None:
        return OstreeSettings()
    return settings_from(validate(document.Ostree, data, file, "ostree"), root, file)


def settings_from(doc: document.Ostree | None, root: Path, file: str) -> OstreeSettings:
    if doc is None:
        return OstreeSettings()
    base = _base(doc.base, root, file) if doc.base else OstreeBase("sample")
    return OstreeSettings(ref=doc.ref, base=base, deltas_from=doc.deltas_from)


def _base(doc: document.OstreeBase, root: Path, file: str) -> OstreeBase:
    if doc.sample:
        return OstreeBase("sample")
    assert doc.repo is not None and doc.ref is not None  # the model's rule
    gpg_key = None
    if doc.gpg_key is not None:
        key_path = (root / doc.gpg_key).resolve()
        if not key_path.is_file():
            raise InputError(file, "ostree.base.gpg_key", f"{key_path} does not exist")
        gpg_key = str(key_path)
    if doc.repo.startswith(("http://", "https://")):
        return OstreeBase("url", doc.repo, doc.ref, gpg_key)
    location = (root / doc.repo).resolve()
    if not (location / "config").is_file():
        raise InputError(file, "ostree.base.repo",
                         f"{location} is not an ostree repository (no config file)",
                         hint="give the repository directory, or an http(s):// URL")
    return OstreeBase("path", str(location), doc.ref, gpg_key)
