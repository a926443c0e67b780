"""The SBOM of a composed commit: DIR/sbom/NAME.spdx.json, SPDX 2.3 JSON.

It lists what the commit holds (builder/publish/contents.py reads it from the commit):
- every RPM of its rpm database: name, [epoch:]version-release, arch, declared license,
  supplier (the RPM vendor), a `pkg:rpm` purl and, for the packages of the image's lock
  file (DIR/blueprints/NAME.ARCH.lock.json), the sha256 of the RPM file that was installed;
- every image of its read-only image store, with a `pkg:oci` purl and its manifest digest;
- the files of the MicroShift payload (/usr/bin/microshift, and the release's other
  `payload.files`: microshift-etcd, ...) with the sha256 rpm recorded for each;
and relates them to the commit: DOCUMENT DESCRIBES the commit, the commit CONTAINS each
package, image and payload file, the package installing a payload file CONTAINS it.

RPM licenses that are not SPDX license expressions (Fedora's older short names such as
"ASL 2.0") become LicenseRef- identifiers with the original text, as osbuild does.
The document is a function of the commit and the lock file only: `created` is the commit's
timestamp (the release's source_date_epoch), the namespace is derived from the commit
checksum, and every list is sorted, so the same commit gives the same bytes.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
import time
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

from builder.blueprint.target import ImageTarget
from builder.compose.inputs import PackageFile, load_compose_inputs
from builder.context import Context
from builder.core.errors import BuildError, InputError
from builder.core.files import write_atomic
from builder.core.ostree import Repo
from builder.publish.contents import (
    PAYLOAD_PATH,
    CommitContents,
    InstalledFile,
    InstalledPackage,
    StoredImage,
    read_contents,
)
from builder.release.model import Image, Payload, PayloadFile

NAMESPACE_BASE = "https://spdx.org/spdxdocs/microshift-edge-builder"
COMMIT_ID = "SPDXRef-OSTree-commit"
OSTREE_REF_TYPE = "ostree-ref"  # externalRefs OTHER: REF@COMMIT of the described commit
NOASSERTION = "NOASSERTION"
# purl namespaces of well-known RPM vendors (the purl spec's rpm examples); others are
# the vendor string itself, lower-cased and percent-encoded.
VENDOR_NAMESPACES = {"Red Hat, Inc.": "redhat", "Fedora Project": "fedora",
                     "CentOS": "centos", "AlmaLinux": "almalinux"}


@dataclass(frozen=True)
class SbomInputs:
    image: str
    ref: str
    contents: CommitContents
    locked: tuple[PackageFile, ...] = ()
    release_images: tuple[Image, ...] = ()  # names images by component; flags SAMPLE ones
    payload_sources: tuple[PayloadFile, ...] = ()  # only for a commit of the current release


def sbom_path(ctx: Context, image: str) -> Path:
    """DIR/sbom/IMAGE.spdx.json, IMAGE-ARCH.spdx.json for a several-architecture release."""
    return ctx.layout.sbom(ctx.release.arch_name(image, ctx.target_arch))


def write_sbom(ctx: Context, target: ImageTarget, commit: str | None = None) -> Path:
    """Write the SBOM (`sbom_path`) of `commit`, default the one the target's ref points
    to."""
    repo = Repo(ctx.layout.ostree_repo, ctx.runner)
    image, ref = target.image, target.ref
    commit = commit or (repo.rev_parse(ref) if repo.exists() else None)
    if commit is None:
        raise BuildError(f"{repo.path} has no commit on ref {ref} for image {image}",
                         hint=f"compose it first: `python -m builder compose --image {image}`")
    path = sbom_path(ctx, image)
    with ctx.progress.step(f"SBOM of {image} ({ref} = {commit[:12]})"):
        # compose commits the first architecture only (builder/compose/commit.py).
        files = ctx.release.payload_for(ctx.target_arch)
        contents = read_contents(repo, commit, tuple(f.install for f in files))
        locked = _locked_packages(ctx, image, contents)
        same_release = contents.version == ctx.release.evr
        document = build_document(SbomInputs(
            image=image, ref=ref, contents=contents, locked=locked,
            release_images=ctx.release.images(), payload_sources=files if same_release else ()))
        size = write_atomic(path, json.dumps(document, indent=2, sort_keys=True) + "\n")
        if contents.rpmdb is None:
            ctx.progress.info(f"commit {commit[:12]} has no rpm database: no RPMs listed")
        ctx.progress.info(f"{len(contents.packages)} RPMs ({len(locked)} from the lock file "
                          f"with their sha256), {len(contents.images)} images, "
                          f"{len(contents.payload)} MicroShift payload files")
        ctx.progress.wrote(str(path), size)
    return path


def ensure_sbom(ctx: Context, target: ImageTarget, commit: str) -> Path:
    """The SBOM (`sbom_path`) describing `commit`: the existing one, else a new one."""
    path = sbom_path(ctx, target.image)
    if described_commit(path) == (target.ref, commit):
        return path
    return write_sbom(ctx, target, commit)


def described_commit(path: Path) -> tuple[str, str] | None:
    """(ref, commit) an SBOM written here describes; None when there is none or it is not
    one of ours."""
    with suppress(OSError, ValueError):
        document = json.loads(path.read_text())
        for package in document.get("packages", []):
            if package.get("SPDXID") != COMMIT_ID:
                continue
            for ref in package.get("externalRefs", []):
                if ref.get("referenceType") == OSTREE_REF_TYPE:
                    name, _, commit = str(ref.get("referenceLocator")).rpartition("@")
                    return name, commit
    return None


def _locked_packages(ctx: Context, image: str,
                     contents: CommitContents) -> tuple[PackageFile, ...]:
    """The lock file's packages that the commit holds (same NEVRA). A lock rendered for
    another release, or a commit composed elsewhere, contributes only what matches."""
    try:
        inputs = load_compose_inputs(ctx.build_dir, image, ctx.target_arch)
    except InputError:
        ctx.progress.info(f"no lock file for {image}: RPM file checksums are not known")
        return ()
    installed = {pkg.nevra for pkg in contents.packages}
    matched = tuple(pkg for pkg in inputs.packages if pkg.nevra in installed)
    missing = sorted(pkg.nevra for pkg in inputs.packages if pkg.nevra not in installed)
    if missing:
        ctx.progress.info(f"{inputs.lock_path.name} names {len(missing)} packages that commit "
                          f"{contents.commit[:12]} does not hold (another release's lock?): "
                          + ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else ""))
    return matched


# --- the document ---------------------------------------------------------------------
def build_document(inputs: SbomInputs) -> dict[str, Any]:
    contents = inputs.contents
    licenses = LicenseExpressions()
    locked = {pkg.nevra: pkg for pkg in inputs.locked}
    rpms = [(rpm_id(pkg), _rpm_package(pkg, locked.get(pkg.nevra), licenses))
            for pkg in contents.packages]
    images = [(image_id(img), _image_package(img, inputs.release_images))
              for img in contents.images]
    packages = [_commit_package(inputs), *(p for _, p in rpms), *(p for _, p in images)]
    relationships = [_relation("SPDXRef-DOCUMENT", "DESCRIBES", COMMIT_ID)]
    relationships += [_relation(COMMIT_ID, "CONTAINS", spdx_id) for spdx_id, _ in rpms + images]
    for file in contents.payload:
        source = next((f.source for f in inputs.payload_sources if f.install == file.path),
                      None)
        packages.append(_payload_package(file, contents, source))
        relationships.append(_relation(COMMIT_ID, "CONTAINS", payload_id(file)))
        owner = next((spdx_id for spdx_id, p in rpms if p["name"] == file.package), None)
        if owner is not None:
            relationships.append(_relation(owner, "CONTAINS", payload_id(file)))
    document: dict[str, Any] = {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": f"{inputs.image}-{contents.version or contents.commit[:12]}",
        "documentNamespace": f"{NAMESPACE_BASE}/{inputs.image}-{contents.commit}",
        "creationInfo": {
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(contents.timestamp)),
            "creators": [f"Tool: {tool_name()}"],
        },
        "packages": packages,
        "relationships": relationships,
    }
    if licenses.extracted:
        document["hasExtractedLicensingInfos"] = licenses.extracted_infos()
    return document


PAYLOAD_ID = "SPDXRef-MicroShift-executable"  # /usr/bin/microshift


def payload_id(file: InstalledFile) -> str:
    if file.path == PAYLOAD_PATH:
        return PAYLOAD_ID
    return f"SPDXRef-Payload-{spdx_safe(file.path.rsplit('/', 1)[-1])}-{_short_hash(file.path)}"


def tool_name() -> str:
    try:
        return f"microshift-edge-builder-{importlib.metadata.version('microshift-edge-builder')}"
    except importlib.metadata.PackageNotFoundError:
        return "microshift-edge-builder"


def _relation(element: str, kind: str, related: str) -> dict[str, str]:
    return {"spdxElementId": element, "relationshipType": kind, "relatedSpdxElement": related}


def spdx_safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "-", text).strip("-") or "x"


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def rpm_id(pkg: InstalledPackage) -> str:
    """Unique and stable: the NEVRA's hash keeps names that differ only in characters SPDX
    ids do not allow (libstdc++ and libstdc--) apart."""
    return f"SPDXRef-RPM-{spdx_safe(pkg.name)}-{spdx_safe(pkg.arch)}-{_short_hash(pkg.nevra)}"


def image_id(image: StoredImage) -> str:
    last = image.repository.rsplit("/", 1)[-1]
    return f"SPDXRef-Image-{spdx_safe(last)}-{image.digest.removeprefix('sha256:')[:12]}"


def rpm_purl(pkg: InstalledPackage) -> str:
    namespace = VENDOR_NAMESPACES.get(pkg.vendor or "",
                                      quote(pkg.vendor.lower(), safe="") if pkg.vendor else "")
    version = quote(f"{pkg.version}-{pkg.release}", safe="")
    purl = f"pkg:rpm/{namespace + '/' if namespace else ''}{quote(pkg.name, safe='')}@{version}"
    purl += f"?arch={quote(pkg.arch, safe='')}"
    return purl + (f"&epoch={pkg.epoch}" if pkg.epoch else "")


def oci_purl(image: StoredImage) -> str:
    """pkg:oci/NAME@DIGEST?repository_url=REGISTRY/PATH[&tag=TAG] (purl-spec, type oci)."""
    name = image.repository.rsplit("/", 1)[-1].lower()
    purl = (f"pkg:oci/{quote(name, safe='')}@{quote(image.digest, safe='')}"
            f"?repository_url={quote(image.repository, safe='/:')}")
    return purl + (f"&tag={quote(image.tag, safe='')}" if image.tag else "")


def _purl_ref(locator: str) -> dict[str, str]:
    return {"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
            "referenceLocator": locator}


def _sha256(value: str) -> list[dict[str, str]]:
    return [{"algorithm": "SHA256", "checksumValue": value}]


def _commit_package(inputs: SbomInputs) -> dict[str, Any]:
    contents = inputs.contents
    return {
        "SPDXID": COMMIT_ID,
        "name": inputs.image,
        "versionInfo": contents.version or NOASSERTION,
        "downloadLocation": NOASSERTION,
        "filesAnalyzed": False,
        "primaryPackagePurpose": "OPERATING-SYSTEM",
        # An ostree commit checksum is the sha256 of the commit object.
        "checksums": _sha256(contents.commit),
        "externalRefs": [{"referenceCategory": "OTHER", "referenceType": OSTREE_REF_TYPE,
                          "referenceLocator": f"{inputs.ref}@{contents.commit}"}],
        "comment": f"ostree commit {contents.commit} on ref {inputs.ref}; " + (
            f"RPMs read from its rpm database {contents.rpmdb}" if contents.rpmdb
            else "it has no rpm database, so no RPMs are listed"),
    }


def _rpm_package(pkg: InstalledPackage, locked: PackageFile | None,
                 licenses: LicenseExpressions) -> dict[str, Any]:
    package: dict[str, Any] = {
        "SPDXID": rpm_id(pkg),
        "name": pkg.name,
        "versionInfo": pkg.evr,
        "supplier": f"Organization: {pkg.vendor}" if pkg.vendor else NOASSERTION,
        "downloadLocation": locked.url if locked is not None and locked.url else NOASSERTION,
        "filesAnalyzed": False,
        "licenseConcluded": NOASSERTION,
        "licenseDeclared": licenses.expression(pkg.license),
        "copyrightText": NOASSERTION,
        "externalRefs": [_purl_ref(rpm_purl(pkg))],
    }
    if locked is not None and locked.sha256:
        package["checksums"] = _sha256(locked.sha256)
    else:
        package["comment"] = ("not in the image's lock file (installed with the base "
                              "commit): the sha256 of its RPM file is not known here")
    if pkg.source_rpm:
        package["sourceInfo"] = f"built from source RPM {pkg.source_rpm}"
    if pkg.url and re.match(r"^https?://\S+$", pkg.url):
        package["homepage"] = pkg.url
    if pkg.summary:
        package["summary"] = pkg.summary
    return package


def _image_package(image: StoredImage, release_images: Iterable[Image]) -> dict[str, Any]:
    known = next((img for img in release_images
                  if img.digest == image.digest and img.repository == image.repository), None)
    comment = "embedded in the read-only image store /usr/share/containers/storage"
    if known is not None:
        comment += f"; image {known.name!r} of component {known.component!r}"
        if known.source == "sample":
            comment += "; a SAMPLE image generated by microshift-edge-builder"
    package: dict[str, Any] = {
        "SPDXID": image_id(image),
        "name": image.repository,
        "versionInfo": image.digest,
        "downloadLocation": NOASSERTION,
        "filesAnalyzed": False,
        "primaryPackagePurpose": "CONTAINER",
        "checksums": _sha256(image.digest.removeprefix("sha256:")),
        "externalRefs": [_purl_ref(oci_purl(image))],
        "comment": comment,
    }
    return package


def _payload_package(file: InstalledFile, contents: CommitContents,
                     source: Payload | None) -> dict[str, Any]:
    owner = next((p for p in contents.packages if p.name == file.package), None)
    location = source.location if source is not None and source.kind == "url" else NOASSERTION
    comment = f"{file.path}, installed by {file.package}"
    if source is not None and source.is_sample:
        comment += "; a SAMPLE stand-in generated by microshift-edge-builder, not MicroShift"
    package: dict[str, Any] = {
        "SPDXID": payload_id(file),
        "name": file.path.rsplit("/", 1)[-1],
        "versionInfo": owner.version if owner else NOASSERTION,
        "downloadLocation": location,
        "filesAnalyzed": False,
        "primaryPackagePurpose": "APPLICATION",
        "comment": comment,
    }
    if file.sha256:
        package["checksums"] = _sha256(file.sha256)
    return package


# --- licenses ---------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _licensing() -> Any:
    from license_expression import get_spdx_licensing

    return get_spdx_licensing()


class LicenseExpressions:
    """RPM License tags as SPDX expressions; others as LicenseRef- with the original text."""

    def __init__(self) -> None:
        self.extracted: dict[str, str] = {}

    def expression(self, text: str) -> str:
        from license_expression import ExpressionError

        if not text.strip():
            return NOASSERTION
        if text.startswith("LicenseRef-"):
            return text
        try:
            parsed = _licensing().parse(text, validate=True, strict=True)
        except ExpressionError:
            parsed = None
        if parsed is not None:
            return str(parsed)
        ref = f"LicenseRef-{spdx_safe(text)[:40]}-{_short_hash(text)[:8]}"
        self.extracted[ref] = text
        return ref

    def extracted_infos(self) -> list[dict[str, str]]:
        return [{"licenseId": ref, "name": text,
                 "extractedText": f"The RPM License tag reads: {text}"}
                for ref, text in sorted(self.extracted.items())]
