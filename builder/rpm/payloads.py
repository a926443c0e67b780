"""Fetch and verify component payloads (local path, URL + sha256, or generated sample)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from builder.context import Context
from builder.core.download import DigestMismatch, DownloadFailed, fetch_verified
from builder.core.errors import BuildError, InputError
from builder.core.steps import file_digest
from builder.release.payload import Payload, PayloadFile
from builder.sources.samples import write_payload_standin

# e_machine values (elf.h) of the architectures a payload could be built for by mistake.
ELF_MACHINES = {3: "i386", 20: "ppc", 21: "ppc64le", 22: "s390x", 40: "arm", 62: "x86_64",
                183: "aarch64", 243: "riscv64"}


def resolve_payload(ctx: Context, key: str, files: tuple[PayloadFile, ...],
                    scratch: Path, arch: str) -> dict[PayloadFile, Path]:
    """A local, verified file for every payload file of component `key`'s `arch` package."""
    resolved = {}
    for file in files:
        path = _resolve(ctx, file.source.field, file.source,
                        scratch / "payloads" / key / file.name)
        _check_machine(ctx, key, file, path, arch)
        resolved[file] = path
    return resolved


def check_payloads(ctx: Context) -> None:
    """Every architecture's core payload fetched, sha256-checked and built for it: a wrong
    payload stops the run before any other work (the SAMPLE base, rpmbuild)."""
    with tempfile.TemporaryDirectory(prefix="payload-check-") as scratch:
        for arch in ctx.release.architectures:
            resolve_payload(ctx, "core", ctx.release.payload_for(arch), Path(scratch) / arch,
                            arch)


def _check_machine(ctx: Context, key: str, file: PayloadFile, path: Path, arch: str) -> None:
    """An executable for another architecture would install and never start."""
    machine = elf_machine(path)
    if machine is None or machine == arch:
        return
    payload = ctx.release.component(key).payload
    hint = f"use an {arch} build of {file.install}"
    if payload.per_arch:
        packaged_for = [arch]
    else:
        packaged_for = [a for a in ctx.release.architectures if a != machine]
        if machine in ctx.release.architectures:
            entries = ", ".join(f"{a}: {{...}}" for a in ctx.release.architectures)
            hint = (f"one payload serves every architecture of the release: give each its "
                    f"own under {payload.field} ({entries}), or build only {machine} here "
                    f"(--arch {machine})")
    raise InputError(str(ctx.release_path), file.source.field,
                     f"{file.source.location} is an {machine} executable, but it is "
                     f"packaged for {', '.join(packaged_for)}", hint=hint)


def _resolve(ctx: Context, field: str, payload: Payload, sample_dest: Path) -> Path:
    """A generated sample goes to scratch space (it is only an input of the RPM step, rebuilt
    in milliseconds), so a failed build leaves nothing of it in the build directory."""
    if payload.kind == "sample":
        return write_payload_standin(sample_dest, payload.location, ctx.release.version)
    if payload.kind == "path":
        return Path(payload.location)
    assert payload.sha256 is not None
    cached = ctx.layout.cache("payloads") / payload.sha256
    if cached.is_file() and file_digest(cached) == payload.sha256:
        return cached
    _download(ctx, payload.location, payload.sha256, cached, field)
    return cached


def _download(ctx: Context, url: str, sha256: str, dest: Path, field: str) -> None:
    try:
        with ctx.progress.step(f"download {url}"):
            ctx.progress.info(f"{fetch_verified(url, sha256, dest)} bytes")
    except DigestMismatch as exc:
        raise InputError(str(ctx.release_path), f"{field}.sha256",
                         f"mismatch: {url} has sha256 {exc.actual}, release.yaml says "
                         f"{sha256}") from None
    except DownloadFailed as exc:
        raise BuildError(f"cannot download {field} from {url}: {exc}") from exc


def elf_machine(path: Path) -> str | None:
    """The architecture an ELF file runs on, or None for a file that is not ELF (a script
    or data runs anywhere)."""
    with path.open("rb") as handle:
        header = handle.read(20)
    if len(header) < 20 or header[:4] != b"\x7fELF":
        return None
    machine = int.from_bytes(header[18:20], "big" if header[5] == 2 else "little")
    return ELF_MACHINES.get(machine, f"ELF machine {machine}")
