"""Render spec templates, build the release's RPMs (one cached step each), publish the repo."""

from __future__ import annotations

import io
import os
import re
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from builder.context import Context
from builder.core.diskspace import MiB, ensure_space
from builder.core.errors import BuildError, InputError
from builder.core.paths import SPECS_DIR
from builder.core.signing import SigningKey
from builder.core.steps import (
    Step,
    file_digest,
    is_built,
    link_files,
    materialize,
    publish,
    replace_dir,
    tree_digest,
)
from builder.core.templates import render_file, render_source_tree
from builder.release.catalog import BY_KEY, Component
from builder.release.payload import PayloadFile
from builder.release.release_info import generated_files
from builder.release.template_context import component_context
from builder.rpm.lint import run_rpmlint
from builder.rpm.payloads import resolve_payload
from builder.rpm.repos import publish_arch_repos
from builder.rpm.rpm_signing import sign_repo, sign_rpms
from builder.rpm.rpmbuild import build_spec, rpm_macros

NOARCH = re.compile(r"^BuildArch:\s*noarch\s*$", re.MULTILINE)


@dataclass(frozen=True)
class PackageBuild:
    component: Component
    arch: str
    spec_text: str
    tree: Path            # rendered source tree (becomes Source0)
    payload: tuple[tuple[PayloadFile, Path], ...]  # Source1..N: the release's binaries

    def step(self, epoch: int) -> Step:
        return Step(f"rpm:{self.component.package}.{self.arch}", {
            "spec": self.spec_text,
            "tree": tree_digest(self.tree),
            "payload": [[file.install, file.mode_text, file_digest(path)]
                        for file, path in self.payload] or None,
            "arch": self.arch,
            "macros": rpm_macros(epoch),
        })


def build_release_rpms(ctx: Context, *, lint: bool = True,
                       key: SigningKey | None = None) -> list[Path]:
    """Build, lint, (sign,) and publish the RPMs and their repository.

    With a key, the published RPMs carry its signature and the repository a detached
    repomd.xml.asc; the unsigned builds stay in the step cache.
    """
    release = ctx.release
    rpms: list[Path] = []
    with tempfile.TemporaryDirectory(prefix=".render-", dir=_ensure(ctx.build_dir)) as scratch, \
            ctx.progress.step(f"rpms: {release.evr} for {', '.join(release.architectures)}"):
        # Render everything first: a template or payload error stops before any rpmbuild.
        packages = _prepare_all(ctx, Path(scratch))
        unbuilt = [pkg for pkg in packages
                   if not is_built(pkg.step(release.source_date_epoch), ctx.build_dir)]
        ensure_space(ctx.build_dir, rpm_space(unbuilt), "the RPM build")
        for pkg in packages:
            rpms.extend(_build(ctx, pkg))
        specs = {_spec_name(pkg): pkg.spec_text for pkg in packages}
        replace_dir(ctx.layout.specs, lambda tmp: _write_specs(tmp, specs))
    if lint:
        run_rpmlint(ctx, rpms)
    if key is not None:
        rpms = _signed(ctx, rpms, key)
    epoch = release.source_date_epoch
    inputs = {"rpms": {rpm.name: file_digest(rpm) for rpm in rpms}, "epoch": epoch,
              "signed_by": key.key_id if key else None}
    with ctx.progress.step("repo: createrepo_c, one repository per architecture"):
        publish_arch_repos(ctx, rpms, ctx.layout.yum_repos, signed_by=key.key_id if key else None,
                           sign=None if key is None else lambda out: sign_repo(ctx, out, key))
        rpms_step = Step("rpms", inputs)
        rpms_out, _ = materialize(rpms_step, ctx.build_dir, lambda out: link_files(rpms, out),
                                  ctx.progress)
        publish(ctx.build_dir, "rpms", rpms_step, rpms_out)
        ctx.progress.info(f"{len(rpms)} RPMs in {ctx.layout.rpms}, repositories "
                          f"{ctx.layout.yum_repos}/{{{','.join(release.architectures)}}}")
    return sorted(ctx.layout.rpms.glob("*.rpm"))


def _spec_name(pkg: PackageBuild) -> str:
    """PACKAGE.spec for a noarch package, PACKAGE.ARCH.spec for an architecture's own (as
    blueprints/NAME.ARCH.lock.json): a per-architecture payload gives each its own spec."""
    if pkg.arch == "noarch":
        return f"{pkg.component.package}.spec"
    return f"{pkg.component.package}.{pkg.arch}.spec"


def rpm_space(packages: list[PackageBuild]) -> int:
    """What building these RPMs writes, at least: each payload three times (source tarball,
    build root, compressed RPM) and 256 KiB per package for the rest."""
    return sum(3 * path.stat().st_size for pkg in packages for _, path in pkg.payload) \
        + len(packages) * MiB // 4


def _signed(ctx: Context, rpms: list[Path], key: SigningKey) -> list[Path]:
    step = Step("signed-rpms", {"rpms": {rpm.name: file_digest(rpm) for rpm in rpms},
                                "key": key.key_id, "epoch": ctx.release.source_date_epoch})

    def produce(out: Path) -> None:
        copies = [out / rpm.name for rpm in rpms]
        for rpm, copy in zip(rpms, copies, strict=True):
            shutil.copyfile(rpm, copy)
        sign_rpms(ctx, copies, key)

    out, _ = materialize(step, ctx.build_dir, produce, ctx.progress)
    return sorted(out.glob("*.rpm"))


def _prepare_all(ctx: Context, scratch: Path) -> list[PackageBuild]:
    """A build per component and architecture; a noarch package is built once, for all."""
    builds: dict[tuple[str, str], PackageBuild] = {}
    for comp in ctx.release.components:
        for arch in ctx.release.architectures:
            pkg = _prepare(ctx, comp.key, arch, scratch / f"{comp.key}.{arch}")
            builds.setdefault((comp.key, pkg.arch), pkg)
    return list(builds.values())


def _prepare(ctx: Context, key: str, arch: str, workdir: Path) -> PackageBuild:
    release = ctx.release
    component = BY_KEY[key]
    context = component_context(release, key)
    context["template_name"] = component.spec_template
    context["changelog_date"] = time.strftime(
        "%a %b %d %Y", time.gmtime(release.source_date_epoch))
    if not (SPECS_DIR / component.spec_template).is_file():
        raise BuildError(f"no spec template specs/{component.spec_template} for component {key}")
    payload = release.component(key).payload
    files = payload.files_for(arch)
    context["payload_files"] = [{"source": f.name, "install": f.install, "mode": f.mode_text}
                                for f in files]
    spec_text = render_file(SPECS_DIR, component.spec_template, context)
    tree = workdir / "tree"
    tree.mkdir(parents=True)
    written = render_source_tree(component.package, context, tree)
    for rel, data in generated_files(release, key).items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(data)
        (tree / rel).chmod(0o644)
        written.append(Path(rel))
    _check_no_overlap(ctx, key, files, written, payload.field_for(arch))
    resolved = resolve_payload(ctx, key, files, workdir, arch)
    # Built for "noarch" whatever the release's architectures, so it is one and the same
    # package (and build step) in every architecture's repository.
    target = "noarch" if NOARCH.search(spec_text) else arch
    return PackageBuild(component, target, spec_text, tree, tuple(resolved.items()))


def _check_no_overlap(ctx: Context, key: str, files: tuple[PayloadFile, ...],
                      written: list[Path], field: str) -> None:
    shipped = {"/" + rel.as_posix() for rel in written}
    for index, file in enumerate(files):
        if file.install in shipped:
            raise InputError(str(ctx.release_path), field,
                             f"file {index + 1} installs {file.install}, which the package "
                             f"already ships from specs/sources/{BY_KEY[key].package}/; "
                             "allowed: a path no package source uses")


def _build(ctx: Context, pkg: PackageBuild) -> list[Path]:
    release = ctx.release
    epoch = release.source_date_epoch
    name = f"{pkg.component.package}-{release.version}"

    def produce(out: Path) -> None:
        topdir = out / "topdir"
        sources = topdir / "SOURCES"
        sources.mkdir(parents=True)
        (sources / f"{name}.tar").write_bytes(deterministic_tar(pkg.tree, name, epoch))
        for file, path in pkg.payload:
            shutil.copyfile(path, sources / file.name)
        spec = topdir / "SPECS" / f"{pkg.component.package}.spec"
        spec.parent.mkdir(parents=True)
        spec.write_text(pkg.spec_text)
        for rpm in build_spec(ctx.runner, spec, topdir, pkg.arch, epoch):
            os.replace(rpm, out / rpm.name)
        shutil.rmtree(topdir)

    out, built = materialize(pkg.step(epoch), ctx.build_dir, produce, ctx.progress)
    built_rpms = sorted(out.glob("*.rpm"))
    if built:
        for rpm in built_rpms:
            ctx.progress.wrote(rpm.name, rpm.stat().st_size)
    return built_rpms


def deterministic_tar(tree: Path, prefix: str, epoch: int) -> bytes:
    """A tar of `tree` under `prefix/` whose bytes depend only on names, modes and contents."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entries = [tree, *sorted(tree.rglob("*"))]
        for path in entries:
            rel = path.relative_to(tree).as_posix()
            info = tarfile.TarInfo(prefix if rel == "." else f"{prefix}/{rel}")
            info.mtime = epoch
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if path.is_dir():
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            else:
                info.mode = path.stat().st_mode & 0o777
                info.size = path.stat().st_size
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
    return buffer.getvalue()


def _write_specs(dest: Path, specs: dict[str, str]) -> None:
    for name, text in sorted(specs.items()):
        (dest / name).write_text(text)


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
