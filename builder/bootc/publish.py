"""Pushing a built bootc image: its manifest by digest and tag `VERSION-ARCH`, its signature
into the lookaside directory, its SBOM as an artifact referring to it, and the files a
device needs to accept it (DIR/bootc/device/: policy.json, registries.d/, the key)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from builder.bootc.image import BootcImage
from builder.bootc.oci import MANIFEST
from builder.bootc.registry import (
    POLICY_KEY,
    Pushed,
    attach_sbom,
    device_policy,
    push,
    registries_d,
)
from builder.context import Context
from builder.core.files import write_atomic
from builder.core.signing import SigningKey, export_public_key


@dataclass(frozen=True)
class PushOptions:
    namespace: str                   # REGISTRY/NAMESPACE
    key: SigningKey | None = None    # signs the image (GPG simple signing)
    signatures: Path | None = None   # the lookaside directory signatures are written to
    tls_verify: bool = True
    lookaside_url: str = ""          # where devices read signatures ("": beside the site)


def push_tag(ctx: Context, arch: str) -> str:
    """The tag an architecture's image is pushed under (`disk --from-image` follows it)."""
    return f"{ctx.release.evr}-{arch}"


def push_image(ctx: Context, built: BootcImage, options: PushOptions) -> Pushed:
    repository = f"{options.namespace}/{built.image}"
    tag = push_tag(ctx, built.arch)
    with ctx.progress.step(f"push {repository}:{tag}"):
        pushed = push(ctx.runner, built.layout, built.arch, f"{repository}:{tag}",
                      key=options.key, signatures=options.signatures,
                      tls_verify=options.tls_verify)
        if pushed.digest != built.manifest.digest:
            ctx.progress.warn(f"the registry holds {pushed.digest}, not the built "
                              f"{built.manifest.digest}")
        ctx.progress.info(f"pushed {pushed.by_digest}"
                          + (f", signed by {options.key.key_id}" if options.key else ""))
        sbom = ctx.layout.sbom(ctx.release.arch_name(built.image, built.arch))
        if sbom.is_file():
            registry, _, name = repository.partition("/")
            subject = built.manifest.descriptor(MANIFEST)
            found_by = attach_sbom(registry, name, subject, sbom.read_bytes(),
                                   https=options.tls_verify)
            ctx.progress.info(f"SBOM attached: {repository}:{found_by}")
        write_device_files(ctx, repository, options)
        record_push(ctx, built, repository, pushed.digest)
    return pushed


def record_push(ctx: Context, built: BootcImage, repository: str, digest: str) -> None:
    """The report says where the image went: `publish` names that reference in the index
    image-mode devices read, as their containers policy scopes it."""
    path = ctx.layout.bootc_report(built.image, built.arch)
    report = json.loads(path.read_text())
    report["pushed"] = {"reference": repository, "digest": digest}
    write_atomic(path, json.dumps(report, indent=2, sort_keys=True) + "\n")


def write_device_files(ctx: Context, repository: str, options: PushOptions) -> Path:
    """DIR/bootc/device/: what a device ships in /etc to accept only the release's signed
    images (policy.json, registries.d/microshift.yaml) and the key they are checked with."""
    out = ctx.layout.bootc_device_files
    policy = device_policy(options.namespace)
    write_atomic(out / "policy.json", json.dumps(policy, indent=2, sort_keys=True) + "\n")
    registries_d(out / "registries.d", options.namespace,
                 lookaside=options.lookaside_url or "https://SITE/sigstore")
    if options.key is not None:
        export_public_key(ctx.runner, options.key, out / Path(POLICY_KEY).name)
    return out
