"""The installer ISO of an image: its ostree commit, the embedded kickstart and a manifest.

DIR/installer/NAME.iso holds
  /ostree/repo     an archive repo with the image's commit and nothing else (pull-local
                   --depth=0 of the ref into a fresh repo)
  /ks.cfg          the `embedded` kickstart, which installs from file:///run/install/repo/...
  /manifest.json   commit checksum, ref, version and sizes
  /sbom.spdx.json  the commit's SBOM (SPDX 2.3, DIR/sbom/NAME.spdx.json), when given
With a RHEL boot ISO (`boot_iso`) the files are injected into it and every boot entry gets
`inst.ks=`, so the result installs unattended (see builder/installer/bootiso.py). Without
one the ISO is a data disc that does not boot.

Everything is built in a temporary directory beside the target, read back and verified
(builder/installer/read_back.py: xorriso listing, `ostree fsck` of the extracted repo, the
commit against the manifest, the kickstart against pykickstart, the boot entries, the media
checksum), and only then renamed into place: a failure leaves no half-written ISO.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from builder.core.errors import BuildError
from builder.core.ostree import Repo, commit_signed
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.core.steps import builder_code_digest, canonical_json, file_digest
from builder.installer import bootiso
from builder.installer.kickstart import ISO_REPO_DIR, write_kickstart
from builder.installer.manifest import (
    KICKSTART_NAME,
    MANIFEST_NAME,
    SBOM_NAME,
    Manifest,
    ostree_output,
)
from builder.installer.read_back import verify_iso

CHECKSUM_RE = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class IsoRequest:
    image: str
    ref: str
    source_repo: Path          # DIR/ostree/repo
    kickstart: str             # rendered `embedded` kickstart, already validated
    kickstart_private: bool    # it holds a pull secret
    output: Path               # DIR/installer/NAME.iso
    source_date_epoch: int
    boot_iso: Path | None = None
    sbom: Path | None = None   # the commit's SPDX SBOM


def resolve_commit(runner: Runner, repo: Path, ref: str, image: str) -> str:
    """The commit `ref` points to in `repo`; a clear error when there is none yet."""
    hint = (f"compose it first (`python -m builder compose --image {image}`), or name "
            "the image's ref with --ref")
    source = Repo(repo, runner)
    if not source.exists():
        raise BuildError(f"{repo}: no ostree repository, so no commit for image {image}",
                         hint=hint)
    commit = source.rev_parse(ref)
    if commit is None:
        raise BuildError(f"{repo}: no commit for image {image} on ref {ref}", hint=hint)
    if not CHECKSUM_RE.match(commit):
        raise BuildError(f"ostree rev-parse {ref} printed {commit!r}, expected a checksum")
    return commit


def stage_repo(runner: Runner, source: Path, ref: str, dest: Path) -> str:
    """A fresh archive repo at dest with only the commit of `ref` (no parents); its checksum."""
    dest.mkdir(parents=True)
    ostree_output(runner, dest, "init", "--mode=archive")
    ostree_output(runner, dest, "pull-local", "--depth=0", str(source), ref)
    # No summary file: it records when it was generated (ostree.summary.last-modified, which
    # cannot be pinned), so it would make every ISO different. Anaconda pulls the one ref by
    # name, which needs no summary, and a summary that is absent can never be stale.
    # Pull scratch space: empty, but ostree expects the directory to exist.
    for leftover in (dest / "tmp").iterdir():
        if leftover.is_dir():
            shutil.rmtree(leftover)
        else:
            leftover.unlink()
    return ostree_output(runner, dest, "rev-parse", ref).strip()


def tree_size(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    return sum(p.stat().st_size for p in files), len(files)


def volume_id_for(image: str) -> str:
    """ISO 9660 volume ids are at most 32 characters; keep them udev-label friendly."""
    return re.sub(r"[^A-Z0-9_-]", "-", image.upper())[:32]


# --- building ---------------------------------------------------------------------------
def build_installer_iso(runner: Runner, progress: Progress, request: IsoRequest) -> Manifest:
    """Write request.output (and its .json sidecar) or nothing at all; an ISO already
    written from the same inputs is kept."""
    request.output.parent.mkdir(parents=True, exist_ok=True)
    identity = iso_identity(runner, request)
    kept = _kept_manifest(request.output, identity)
    if kept is not None:
        progress.skipped(f"installer {request.output.name}", identity)
        return kept
    listing = None
    if request.boot_iso is not None:
        with progress.step("inspect boot ISO"):
            listing = bootiso.inspect_boot_iso(runner, request.boot_iso)
            progress.info(f"{request.boot_iso.name}: installer ISO, volume id "
                          f"{listing.volume_id!r}")
    work = Path(tempfile.mkdtemp(prefix=f".{request.output.name}.tmp-",
                                 dir=request.output.parent))
    try:
        manifest = _stage(runner, progress, request, work, listing)
        iso = work / request.output.name
        with progress.step("write ISO"):
            _write_iso(runner, request, iso, listing, manifest)
        with progress.step("verify ISO"):
            checks = verify_iso(runner, iso, manifest, work / "verify", boot_iso=listing)
            for check in checks:
                progress.info(f"ok: {check}")
        _publish(iso, manifest, request.output, identity)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    progress.wrote(str(request.output), request.output.stat().st_size)
    return manifest


def _stage(runner: Runner, progress: Progress, request: IsoRequest, work: Path,
           listing: bootiso.IsoListing | None) -> Manifest:
    stage = work / "stage"
    with progress.step("stage ostree repo"):
        commit = stage_repo(runner, request.source_repo, request.ref, stage / ISO_REPO_DIR)
        repo_bytes, repo_files = tree_size(stage / ISO_REPO_DIR)
        progress.info(f"{request.ref} = {commit[:12]}: {repo_files} files, {repo_bytes} bytes")
    write_kickstart(stage / KICKSTART_NAME, request.kickstart,
                    private=request.kickstart_private)
    manifest = Manifest(
        image=request.image, ref=request.ref, commit=commit,
        version=Repo(request.source_repo, runner).metadata(commit, "version"),
        signed=commit_signed(runner, request.source_repo, commit),
        volume_id=listing.volume_id if listing else volume_id_for(request.image),
        kickstart=KICKSTART_NAME, repo=ISO_REPO_DIR,
        boot_iso={"file": listing.path.name, "volume_id": listing.volume_id} if listing
        else None,
        sizes={"repo_bytes": repo_bytes, "repo_files": repo_files,
               "kickstart_bytes": len(request.kickstart.encode())},
        sbom=SBOM_NAME if request.sbom is not None else None)
    if request.sbom is not None:
        shutil.copyfile(request.sbom, stage / SBOM_NAME)
    (stage / MANIFEST_NAME).write_text(manifest.to_json())
    return manifest


def _write_iso(runner: Runner, request: IsoRequest, iso: Path,
               listing: bootiso.IsoListing | None, manifest: Manifest) -> None:
    work = iso.parent
    stage = work / "stage"
    maps = {"ostree": stage / "ostree", KICKSTART_NAME: stage / KICKSTART_NAME,
            MANIFEST_NAME: stage / MANIFEST_NAME}
    if manifest.sbom is not None:
        maps[manifest.sbom] = stage / manifest.sbom
    # xorriso takes the volume dates and UUID from SOURCE_DATE_EPOCH, and each file's dates
    # from its mtime, which is clamped to the same epoch: same inputs, same ISO bytes.
    env = {**bootiso.C_LOCALE, "SOURCE_DATE_EPOCH": str(request.source_date_epoch)}
    if listing is None:
        clamp_mtimes(stage, request.source_date_epoch)
        runner.run(bootiso.data_iso_argv(iso, manifest.volume_id, maps), env=env)
        return
    # The pull secret must not be saved onto the device with the kickstart copies.
    extra = ("inst.nosave=all_ks",) if request.kickstart_private else ()
    args = bootiso.kernel_args(listing.volume_id, KICKSTART_NAME, extra)
    updates = bootiso.patch_boot_configs(runner, listing, work / "boot", args)
    clamp_mtimes(work, request.source_date_epoch)
    runner.run(bootiso.replay_argv(listing.path, iso, updates, maps), env=env)
    # The "Test this media" entry checks the implanted MD5, which the rebuild invalidated.
    runner.run(["implantisomd5", "--force", str(iso)])


def clamp_mtimes(root: Path, epoch: int) -> None:
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            os.utime(path, (epoch, epoch))


def iso_identity(runner: Runner, request: IsoRequest) -> str:
    """What an ISO is made of: the commit, the kickstart, the SBOM, the boot ISO, the epoch
    and the builder's code."""
    return hashlib.sha256(canonical_json({
        "image": request.image, "ref": request.ref,
        "commit": Repo(request.source_repo, runner).rev_parse(request.ref),
        "kickstart": hashlib.sha256(request.kickstart.encode()).hexdigest(),
        "private": request.kickstart_private, "epoch": request.source_date_epoch,
        "sbom": file_digest(request.sbom) if request.sbom is not None else None,
        "boot_iso": file_digest(request.boot_iso) if request.boot_iso is not None else None,
        "builder": builder_code_digest(),
    })).hexdigest()


def _kept_manifest(output: Path, identity: str) -> Manifest | None:
    """The manifest of the ISO at `output` when its sidecar says it was made from these
    inputs and the ISO still has the size it had."""
    try:
        sidecar = json.loads(output.with_suffix(".json").read_text())
        if sidecar["iso"].get("inputs") != identity or \
                sidecar["iso"]["bytes"] != output.stat().st_size:
            return None
        fields = {f.name for f in dataclasses.fields(Manifest)}
        return Manifest(**{key: value for key, value in sidecar.items() if key in fields})
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _publish(iso: Path, manifest: Manifest, output: Path, identity: str) -> None:
    digest = hashlib.sha256()
    with iso.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    sidecar: dict[str, Any] = {**asdict(manifest), "iso": {
        "file": output.name, "bytes": iso.stat().st_size, "sha256": digest.hexdigest(),
        "inputs": identity}}
    sidecar_path = output.with_suffix(".json")
    tmp_json = iso.with_suffix(".json")
    tmp_json.write_text(json.dumps(sidecar, indent=2, sort_keys=True) + "\n")
    os.replace(iso, output)
    os.replace(tmp_json, sidecar_path)
