"""Read a written installer ISO back and check what a device relies on: the files Anaconda
reads, the embedded ostree repo (`ostree fsck`, the commit against the manifest), the
kickstart (pykickstart), the SBOM, every boot entry's inst.ks=, the boot images against the
boot ISO's, and the media checksum (checkisomd5). Any mismatch is a BuildError and nothing
is published."""

from __future__ import annotations

import json
from pathlib import Path

from builder.core.errors import BuildError, ToolError
from builder.core.runner import Runner
from builder.installer import bootiso
from builder.installer.kickstart import ISO_REPO_DIR, validate
from builder.installer.manifest import KICKSTART_NAME, MANIFEST_NAME, Manifest, ostree_output


def verify_iso(runner: Runner, iso: Path, manifest: Manifest, scratch: Path, *,
               boot_iso: bootiso.IsoListing | None = None) -> list[str]:
    """Read the ISO back and check what a device relies on; BuildError on any mismatch.

    Returns what was checked, for the progress output.
    """
    listing = bootiso.list_iso(runner, iso)
    for needed in (KICKSTART_NAME, MANIFEST_NAME, f"{ISO_REPO_DIR}/config"):
        if not listing.has(needed):
            raise BuildError(f"{iso}: /{needed} is missing from the written ISO")
    checks = [f"{len(listing.files)} files listed by xorriso, /{KICKSTART_NAME}, "
              f"/{MANIFEST_NAME} and /{ISO_REPO_DIR} among them"]
    bootiso.extract(runner, iso, [("ostree", scratch / "ostree"),
                                  (KICKSTART_NAME, scratch / KICKSTART_NAME),
                                  (MANIFEST_NAME, scratch / MANIFEST_NAME)])
    repo = scratch / ISO_REPO_DIR
    try:
        ostree_output(runner, repo, "fsck")
    except ToolError as exc:
        raise BuildError(f"{iso}: the embedded ostree repo fails `ostree fsck`:\n{exc.stderr}") \
            from exc
    on_iso = json.loads((scratch / MANIFEST_NAME).read_text())
    commit = ostree_output(runner, repo, "rev-parse", manifest.ref).strip()
    if not commit == on_iso.get("commit") == manifest.commit:
        raise BuildError(f"{iso}: ref {manifest.ref} is {commit} in the embedded repo, but the "
                         f"manifest says {on_iso.get('commit')}")
    checks.append(f"embedded repo passes `ostree fsck`; {manifest.ref} is {commit[:12]}, "
                  "as in the manifest")
    validate((scratch / KICKSTART_NAME).read_text(), source=f"{iso}:/{KICKSTART_NAME}")
    checks.append(f"/{KICKSTART_NAME} passes pykickstart (RHEL 9)")
    if manifest.sbom is not None:
        checks.append(_verify_sbom(runner, iso, manifest, scratch / manifest.sbom))
    if boot_iso is not None:
        _verify_boot_entries(runner, listing, scratch / "boot")
        before, after = (bootiso.boot_images(runner, p) for p in (boot_iso.path, iso))
        if before != after:
            raise BuildError(f"{iso}: boot images changed from {before} to {after}")
        runner.run(["checkisomd5", str(iso)])
        checks.append(f"every boot entry has inst.ks=; boot images kept ({', '.join(after)}); "
                      "media checksum (checkisomd5) passes")
    return checks


def _verify_sbom(runner: Runner, iso: Path, manifest: Manifest, dest: Path) -> str:
    """The SBOM on the ISO describes the commit on it."""
    bootiso.extract(runner, iso, [(str(manifest.sbom), dest)])
    try:
        document = json.loads(dest.read_text())
    except (OSError, ValueError) as exc:
        raise BuildError(f"{iso}: /{manifest.sbom} is not readable JSON: {exc}") from exc
    described = {checksum.get("checksumValue") for package in document.get("packages", [])
                 if package.get("primaryPackagePurpose") == "OPERATING-SYSTEM"
                 for checksum in package.get("checksums", [])}
    if manifest.commit not in described:
        raise BuildError(f"{iso}: /{manifest.sbom} does not describe commit "
                         f"{manifest.commit[:12]}")
    return (f"/{manifest.sbom} describes commit {manifest.commit[:12]} "
            f"({len(document.get('packages', []))} SPDX packages)")


def _verify_boot_entries(runner: Runner, listing: bootiso.IsoListing, scratch: Path) -> None:
    configs = bootiso.boot_configs(listing)
    bootiso.extract(runner, listing.path, [(c, scratch / c) for c in configs])
    wanted = f"inst.ks=hd:LABEL={bootiso.udev_escape(listing.volume_id)}:/{KICKSTART_NAME}"
    for config in configs:
        for line in (scratch / config).read_text().splitlines():
            words = line.split()
            boots = words and (words[0] == "append" or words[0].startswith("linux"))
            if boots and wanted not in words:
                raise BuildError(f"{listing.path}: /{config}: a boot entry lacks {wanted}: "
                                 f"{line.strip()!r}")
