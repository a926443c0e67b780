"""The two commits the device simulation upgrades between: v1 and its child v2.

Preferably the compose's own commits (DIR/ostree/repo: the ref's head and its parent). When
there are none, two small SAMPLE commits built here with the real `ostree` tool: an
os-release, a kernel file, the microshift-greenboot, microshift-core and OVN-Kubernetes
package files rendered from specs/sources (so the simulated boot runs the shipped scripts),
a stand-in microshift binary, and an incompressible payload file that v2 changes, so the
v1 -> v2 static delta has a realistic size to send over the throttled link.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from builder.components.microshift_components import LINK, MANIFESTS
from builder.context import Context
from builder.core.build_layout import Layout
from builder.core.errors import BuildError
from builder.core.files import write_atomic
from builder.core.ostree import Repo, delta_dir
from builder.core.signing import (
    SAMPLE_PUBLIC_KEY,
    SigningKey,
    ensure_sample_key,
    sign_detached,
    stop_agent,
)
from builder.core.templates import render_source_tree
from builder.publish.offline import INDEX, index_json, offline_name, write_offline_file
from builder.publish.statement_signing import sign_timestamp
from builder.release.template_context import component_context
from builder.sources.samples import write_payload_standin
from builder.updater.freshness import DEFAULT_VALIDITY_SECONDS

SAMPLE_REF = "sample/device-sim/x86_64/edge"
SAMPLE_KERNEL = "5.14.0-284.sample.el9.x86_64"
CHECK_SCRIPT = "usr/lib/greenboot/check/required.d/40-microshift-running-check.sh"
# Package source trees rendered into a sample commit, as if their RPMs were installed.
SAMPLE_PACKAGES = (("core", "microshift-core"), ("networking-ovnk", "microshift-networking-ovnk"),
                   ("core", "microshift-greenboot"), ("update", "microshift-update"))
STANDIN_DIR = Path(__file__).parent / "standins"   # the SAMPLE microshift, greenboot.conf
# A patched payload (patched_binary): 16 changes of 64 bytes each in v2, spread over the file.
PATCH_SPOTS, PATCH_BYTES = 16, 64

@dataclass(frozen=True)
class UpdatePair:
    """Where the simulation's commits live and which two it upgrades between."""

    repo: Path
    ref: str
    v1: str
    v2: str
    source: str  # "compose" or "sample"
    public_key: Path | None = None  # what the device trusts for its remote (signed commits)


def sample_version(ctx: Context, number: int) -> str:
    return f"{ctx.release.version}-sample.{number}"


def find_update_pair(ctx: Context, ref: str | None) -> UpdatePair | None:
    """The compose's head of a ref and its parent in DIR/ostree/repo.

    With `ref` given, that ref must exist and have a parent. Without it, the repo's only ref
    is used when it has a parent; anything else returns None (use the SAMPLE commits).
    """
    repo = Repo(ctx.layout.ostree_repo, ctx.runner)
    if not repo.exists():
        if ref is not None:
            raise BuildError(f"no composed repository {repo.path} to take {ref} from",
                             hint="compose the image first, or drop --ref")
        return None
    refs = [ref] if ref is not None else repo.refs()
    if len(refs) != 1:
        return None
    head = repo.rev_parse(refs[0])
    parent = repo.parent(head) if head else None
    if head is None or parent is None or not repo.has_commit(parent):
        if ref is None:
            return None
        raise BuildError(f"{repo.path}: {ref} has no head with a parent commit to upgrade from",
                         hint="compose the image twice (v1, then v2), or drop --ref to use "
                              "the simulation's own SAMPLE commits")
    return UpdatePair(repo.path, refs[0], parent, head, "compose", _public_key(ctx, repo.path))


def _public_key(ctx: Context, repo: Path) -> Path | None:
    """The key the build signed with: a release key's public half (DIR/keys/), else the SAMPLE
    key's, in this build directory or in the one the repository really lives in."""
    for build in (ctx.build_dir, repo.resolve().parent.parent):
        layout = Layout(build)
        for key in (*sorted(layout.public_key("*").parent.glob("*.asc")),
                    layout.sample_public_key):
            if key.is_file():
                return key
    return None


def build_sample_pair(ctx: Context, repo_path: Path, payload_bytes: int, *,
                      patched: bool = False) -> UpdatePair:
    """Two signed SAMPLE commits on SAMPLE_REF in an archive repo, the v1 -> v2 static delta,
    and what `deltas` publishes for devices' updaters beside the repo: updates/REF/ with the
    delta file and the signed index (signed with the build directory's SAMPLE key). With
    `patched`, v2's payload is v1's with a few small regions changed, as a rebuilt binary
    differs from the one before, instead of all new bytes."""
    repo = Repo(repo_path, ctx.runner)
    repo.init("archive")
    epoch = ctx.release.source_date_epoch
    # The build directory's SAMPLE key (DIR/gpg), as composes use: also a short path, which
    # gpg-agent's socket needs (at most 107 bytes).
    key = ensure_sample_key(ctx.runner, ctx.progress, ctx.layout.sample_gpg_home, epoch)
    commits: list[str] = []
    try:
        with tempfile.TemporaryDirectory(prefix=".sample-tree-", dir=repo_path.parent) as tmp:
            parent: str | None = None
            for number in (1, 2):
                tree = Path(tmp) / f"v{number}"
                write_sample_tree(ctx, tree, number, payload_bytes, patched=patched)
                version = sample_version(ctx, number)
                parent = repo.commit(tree, subject=f"MicroShift device simulation {version} "
                                     "(SAMPLE)", timestamp=epoch + number, parent=parent,
                                     bind_ref=SAMPLE_REF, metadata={"version": version},
                                     gpg=key)
                commits.append(parent)
        repo.set_ref(SAMPLE_REF, commits[1])
        if f"{commits[0]}-{commits[1]}" not in repo.delta_list():
            # A payload of all new random bytes: bsdiff could find nothing, only spend time.
            knobs = ["--min-fallback-size=0"] + ([] if patched else ["--max-bsdiff-size=0"])
            repo.delta_generate(commits[1], commits[0], extra=knobs)
        _publish_update(ctx, repo, commits, key, repo_path.parent / "updates" / SAMPLE_REF)
        repo.summary_update(key)
    finally:
        stop_agent(ctx.runner, key.homedir)
    return UpdatePair(repo_path, SAMPLE_REF, commits[0], commits[1], "sample",
                      key.homedir / SAMPLE_PUBLIC_KEY)


def _publish_update(ctx: Context, repo: Repo, commits: list[str], key: SigningKey,
                    out: Path) -> None:
    """updates/REF/: the v1 -> v2 delta file, index.json with its signature, and the signed
    statement that the index is current."""
    v1, v2 = commits
    out.mkdir(parents=True, exist_ok=True)
    offline = write_offline_file(delta_dir(repo.path, v1, v2), out / offline_name(v1, v2),
                                 sample_version(ctx, 1))
    write_atomic(out / INDEX, index_json(SAMPLE_REF, v2, sample_version(ctx, 2), [offline]))
    sign_detached(ctx.runner, key, out / INDEX, ctx.release.source_date_epoch)
    sign_timestamp(ctx.runner, key, out, SAMPLE_REF, DEFAULT_VALIDITY_SECONDS)


def write_sample_tree(ctx: Context, tree: Path, number: int, payload_bytes: int, *,
                      patched: bool = False) -> None:
    """A deployable tree: /usr/etc for /etc, a kernel, os-release, the packages' files."""
    version = sample_version(ctx, number)
    rendered = tree.parent / f".render-v{number}"
    in_release = {comp.key for comp in ctx.release.components}
    for key, package in SAMPLE_PACKAGES:
        if key in in_release:
            render_source_tree(package, component_context(ctx.release, key), rendered)
    shutil.copytree(rendered / "usr", tree / "usr", dirs_exist_ok=True, symlinks=True)
    if (rendered / "etc").is_dir():
        shutil.copytree(rendered / "etc", tree / "usr/etc", dirs_exist_ok=True, symlinks=True)
    shutil.rmtree(rendered)
    _write(tree / "usr/lib/os-release",
           f'NAME="Sample Edge OS"\nID="sample-edge"\nVERSION="{version} (SAMPLE)"\n'
           f'PRETTY_NAME="Sample Edge OS {version} (SAMPLE device simulation)"\n')
    (tree / "usr/etc").mkdir(parents=True, exist_ok=True)
    os.symlink("../usr/lib/os-release", tree / "usr/etc/os-release")
    _write(tree / f"usr/lib/modules/{SAMPLE_KERNEL}/vmlinuz",
           "SAMPLE stand-in for the Linux kernel image\n")
    # The first architecture's files, as compose commits only the first architecture.
    for file in ctx.release.payload_for(ctx.target_arch):
        if file.source.is_sample:
            write_payload_standin(tree / file.install.lstrip("/"), file.source.location,
                                  ctx.release.version)
    _write(tree / "usr/bin/microshift", (STANDIN_DIR / "microshift").read_text(), mode=0o755)
    # What microshift-core's %install adds besides its sources: where MicroShift finds the
    # kustomization microshift-components.service writes at boot.
    link = tree / LINK.lstrip("/")
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(f"/{MANIFESTS}", link)
    _write(tree / "usr/etc/greenboot/greenboot.conf",
           (STANDIN_DIR / "greenboot.conf").read_text())
    # The part of the image an update changes: incompressible, so the delta is its full size.
    payload = tree / "usr/lib/microshift-sample/update-payload.bin"
    payload.parent.mkdir(parents=True, exist_ok=True)
    if patched:
        payload.write_bytes(patched_binary(sample_version(ctx, 1).encode(), payload_bytes,
                                           number - 1))
    else:
        payload.write_bytes(pseudo_random_bytes(f"{version}".encode(), payload_bytes))
    for path in (tree, *tree.rglob("*")):
        if not path.is_symlink():
            os.utime(path, (0, 0))


def pseudo_random_bytes(seed: bytes, size: int) -> bytes:
    """Deterministic bytes that do not compress (sha256 in counter mode)."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(seed + counter.to_bytes(8, "big")).digest()
        counter += 1
    return bytes(out[:size])


def patched_binary(seed: bytes, size: int, patches: int) -> bytes:
    """Random bytes (as a compiled binary compresses little) with `patches` rounds of
    PATCH_SPOTS small changes: a new build of the same program, where a version string,
    some constants and a few relocated jumps differ, not every byte."""
    data = bytearray(pseudo_random_bytes(seed, size))
    for round_ in range(patches):
        for spot in range(PATCH_SPOTS):
            at = (spot * size // PATCH_SPOTS + 4099 * round_) % max(1, size - PATCH_BYTES)
            data[at:at + PATCH_BYTES] = pseudo_random_bytes(
                seed + f"patch {round_} {spot}".encode(), PATCH_BYTES)
    return bytes(data)


def check_tree_is_simulatable(deployment: Path) -> None:
    """A deployment the simulation can boot must carry the shipped greenboot check."""
    if not (deployment / CHECK_SCRIPT).is_file():
        raise BuildError(
            f"deployment {deployment.name} has no /{CHECK_SCRIPT}",
            hint="compose the image with the microshift-greenboot package, or let the "
                 "simulation build its SAMPLE commits (no DIR/ostree/repo)")


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
