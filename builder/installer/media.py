"""An image's kickstart and installer ISO, from the options a user gives.

The `kickstart` and `installer` commands (and `build-image`) describe what they want as a
`MediaOptions`; this module joins it with the image's facts (its rendered blueprint, its
commit and signature in DIR/ostree/repo) into a validated kickstart, and builds the ISO.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from builder.blueprint.target import ImageTarget
from builder.context import Context
from builder.core.errors import BuildError, InputError
from builder.core.ostree import commit_signed, signed_by
from builder.installer.iso import (
    IsoRequest,
    build_installer_iso,
    resolve_commit,
    volume_id_for,
)
from builder.installer.kickstart import (
    DATA_MEDIA_URL,
    EMBEDDED_REPO_URL,
    KickstartContext,
    load_image_facts,
    render,
    write_kickstart,
)
from builder.installer.manifest import Manifest
from builder.publish.sbom import ensure_sbom


@dataclass(frozen=True)
class MediaOptions:
    url: str | None = None               # the ostree repo devices pull upgrades from
    container: str | None = None         # image mode: the bootc image to install
    lookaside: str | None = None         # image mode: where its signatures are published
    pull_secret: Path | None = None
    gpg_key: Path | None = None          # public key the commits are signed with
    ssh_key: Path | None = None
    microshift_config: Path | None = None
    storage: bool | None = None          # default: when the image has TopoLVM
    boot_iso: Path | None = None         # installer only


def write_kickstart_file(ctx: Context, target: ImageTarget, options: MediaOptions,
                        variant: str) -> Path:
    """DIR/kickstart/IMAGE-VARIANT.ks (IMAGE-ARCH-VARIANT.ks for a several-architecture
    release: each names its architecture's ref), validated with pykickstart."""
    if variant == "container" and not options.container:
        raise InputError("command line", "--container",
                         "the container kickstart installs a bootc image from a registry",
                         hint="pass --container REGISTRY/NS/NAME@sha256:... (python -m "
                              "builder bootc --push prints it)")
    if variant == "network" and not options.url:
        raise InputError("command line", "--url",
                         "the network kickstart installs from an ostree repo on a server",
                         hint="pass --url http://SERVER/repo, or --embedded for the ISO")
    with ctx.progress.step(f"kickstart {target.image} ({variant})"):
        ks = kickstart_context(ctx, target, options, variant)
        text = render(variant, ks)
        out = ctx.layout.kickstart(_name(ctx, target.image), variant)
        size = write_kickstart(out, text, private=ks.pull_secret is not None)
        ctx.progress.info("validated with pykickstart (RHEL 9 syntax)")
        ctx.progress.wrote(str(out), size)
    return out


def build_installer(ctx: Context, target: ImageTarget, options: MediaOptions) -> Manifest:
    """DIR/installer/IMAGE.iso (IMAGE-ARCH.iso for a several-architecture release): the
    image's commit for the run's architecture, the embedded kickstart and a manifest."""
    repo = ctx.layout.ostree_repo
    image = target.image
    with ctx.progress.step(f"installer {image}"):
        ks = kickstart_context(ctx, target, options, "embedded")
        if options.boot_iso is None:
            # A data ISO does not boot: the kickstart mounts it by label beside a boot ISO.
            ks = replace(ks, install_url=DATA_MEDIA_URL, media_label=volume_id_for(image))
        commit = resolve_commit(ctx.runner, repo, ks.ref, image)
        request = IsoRequest(
            image=image, ref=ks.ref, source_repo=repo, kickstart=render("embedded", ks),
            kickstart_private=ks.pull_secret is not None,
            output=installer_path(ctx, image),
            source_date_epoch=ctx.release.source_date_epoch,
            boot_iso=options.boot_iso.resolve() if options.boot_iso else None,
            sbom=_sbom(ctx, target, commit))
        manifest = build_installer_iso(ctx.runner, ctx.progress, request)
        _describe(ctx, manifest)
    return manifest


def installer_path(ctx: Context, image: str) -> Path:
    return ctx.layout.installer(_name(ctx, image))


def _name(ctx: Context, image: str) -> str:
    return ctx.release.arch_name(image, ctx.target_arch)


def _sbom(ctx: Context, target: ImageTarget, commit: str) -> Path | None:
    """The commit's SBOM for the ISO; a commit that cannot be described (an rpm database
    this machine's rpm cannot read) gets its ISO without one, said out loud."""
    try:
        return ensure_sbom(ctx, target, commit)
    except BuildError as exc:
        ctx.progress.info(f"WARNING: no SBOM on the ISO: {exc.message}")
        return None


def _describe(ctx: Context, manifest: Manifest) -> None:
    ctx.progress.info(f"commit {manifest.commit} ({manifest.ref}"
                      f"{', version ' + manifest.version if manifest.version else ''}), "
                      f"volume id {manifest.volume_id}")
    if manifest.boot_iso is None:
        ctx.progress.info(
            "this is a DATA ISO (ostree repo, kickstart, manifest) and does not boot: "
            "attach it beside a RHEL 9 boot ISO and boot that with "
            f"inst.ks=hd:LABEL={manifest.volume_id}:/{manifest.kickstart}, or pass "
            "--boot-iso RHEL-9-BOOT.iso for one unattended installer")
    else:
        ctx.progress.info(f"boots {manifest.boot_iso['file']}'s installer with "
                          f"inst.ks=hd:LABEL={manifest.volume_id}:/{manifest.kickstart}")


def kickstart_context(ctx: Context, target: ImageTarget, options: MediaOptions,
                      variant: str) -> KickstartContext:
    """The KickstartContext for `variant` from the options and the image's blueprint."""
    from builder.components.config import load_config

    facts = load_image_facts(target.blueprint, target.image)
    ref = target.ref
    repo = ctx.layout.ostree_repo
    gpg_key = options.gpg_key
    if options.microshift_config:
        # The same strict check MicroShift's loader applies: a bad file fails here, once,
        # not on every device it is installed to.
        load_config(options.microshift_config)
    commit = _local_commit(ctx, repo, ref)
    if commit is not None:
        gpg_key = _verifying_key(ctx, repo, ref, commit, gpg_key)
    return KickstartContext(
        image=target.image,
        install_url=EMBEDDED_REPO_URL if variant in ("embedded", "container")
        else str(options.url),
        ref=ref,
        update_url=options.url if variant != "container" else None,
        container=options.container if variant == "container" else None,
        lookaside=options.lookaside,
        gpg_verify=gpg_key is not None,
        gpg_key=gpg_key,
        microshift_config=_read_text(options.microshift_config, "--microshift-config")
        if options.microshift_config else facts.microshift_config,
        greenboot_max_boot_attempts=facts.max_boot_attempts,
        pull_secret=options.pull_secret,
        storage=facts.storage if options.storage is None else options.storage,
        trusted_sources=facts.trusted_sources,
        firewall_ports=facts.firewall_ports,
        ssh_key=_read_text(options.ssh_key, "--ssh-key").strip() if options.ssh_key else None,
    )


def _verifying_key(ctx: Context, repo: Path, ref: str, commit: str,
                   key: Path | None) -> Path | None:
    """The public key devices verify the local commit with; None when it is unsigned.

    Checked against the commit, so that a wrong key fails here and not on every device.
    Without --gpg-key the SAMPLE key that `compose` signs with by default is tried.
    """
    what = f"commit {commit[:12]} of {ref}"
    if not commit_signed(ctx.runner, repo, commit):
        if key is not None:
            raise InputError("command line", "--gpg-key", f"{what} is not signed, so devices "
                             "could not verify it", hint="sign the commit or drop --gpg-key")
        return None
    sample = ctx.layout.sample_public_key
    candidate = key or (sample if sample.is_file() else None)
    if candidate is None:
        raise InputError("command line", "--gpg-key",
                         f"{what} is signed; devices need the public key to verify it",
                         hint="pass --gpg-key KEY.asc (gpg --export --armor KEYID)")
    if not signed_by(ctx.runner, repo, ref, candidate):
        raise InputError(str(candidate), "", f"this key does not verify the signature of {what}",
                         hint="pass the public half of the key the commit was signed with")
    if key is None:
        ctx.progress.info(f"{what} is signed with the SAMPLE key; devices get {candidate}")
    return candidate


def _local_commit(ctx: Context, repo: Path, ref: str) -> str | None:
    """The ref's commit in DIR/ostree/repo, when the image has been composed here."""
    if not (repo / "config").is_file():
        return None
    proc = ctx.runner.run(["ostree", f"--repo={repo}", "rev-parse", ref], check=False)
    return proc.stdout.decode().strip() if proc.returncode == 0 else None


def _read_text(path: Path, option: str) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(path), "", f"cannot read the file given to {option}: {exc}") \
            from exc
