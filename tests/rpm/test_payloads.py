"""Payload files from a URL: downloaded over real HTTP (a server on 127.0.0.1), checked
against release.yaml's sha256 before anything is built, cached by digest."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from builder.context import Context
from builder.core.errors import InputError
from builder.core.http_thread import ServedInThread
from builder.core.progress import Progress
from builder.rpm.payloads import check_payloads, elf_machine, resolve_payload
from builder.rpm.sample_elf import print_and_exit
from builder.sources.samples import payload_standin
from tests.release.test_release import write_release
from tests.support.cli import run_cli

pytestmark = pytest.mark.integration

BINARY = Path("/usr/bin/true").read_bytes()  # a real executable, as a payload is


class Handler(BaseHTTPRequestHandler):
    served: ClassVar[list[str]] = []
    watch: ClassVar[Path | None] = None  # what is in this directory while a download runs
    seen: ClassVar[list[list[str]]] = []
    body: ClassVar[bytes] = BINARY

    def do_GET(self) -> None:
        self.served.append(self.path)
        if self.watch is not None:
            self.seen.append(sorted(p.name for p in self.watch.glob("*")))
        if self.path != "/microshift":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, list[str]]]:
    Handler.served, Handler.watch, Handler.seen, Handler.body = [], None, [], BINARY
    with ServedInThread(ThreadingHTTPServer(("127.0.0.1", 0), Handler), "payloads") as served:
        yield served.url, Handler.served


def url_release(tmp_path: Path, url: str, sha256: str) -> Path:
    return write_release(tmp_path, lambda d: d["components"]["core"].update(payload={"files": [
        {"install": "/usr/bin/microshift", "sample": "microshift"},
        {"install": "/usr/bin/microshift-etcd", "url": url, "sha256": sha256}]}))


def built_files(build: Path) -> list[Path]:
    return sorted(p for p in build.rglob("*") if p.is_file()) if build.exists() else []


def test_a_payload_whose_sha256_differs_is_refused_and_nothing_is_kept(
        tmp_path: Path, server: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    base, served = server
    wrong = hashlib.sha256(b"what the release engineer meant").hexdigest()
    release = url_release(tmp_path, f"{base}/microshift", wrong)
    build = tmp_path / "build"
    assert run_cli("--release", release, "rpms", "--build-dir", build) == 2
    actual = hashlib.sha256(BINARY).hexdigest()
    err = capsys.readouterr().err
    assert f"error: {release}: components.core.payload.files[1].sha256: mismatch: " \
           f"{base}/microshift has sha256 {actual}, release.yaml says {wrong}" in err
    assert served == ["/microshift"]
    # Nothing downloaded is kept, and no RPM was built from it.
    assert not [p for p in built_files(build) if "payloads" in p.parts or p.suffix == ".rpm"]
    # Fixed in release.yaml, the next run downloads it into the same (existing) cache.
    fixed = url_release(tmp_path, f"{base}/microshift", actual)
    assert run_cli("--release", fixed, "rpms", "--build-dir", build) == 0
    assert (build / "cache/payloads" / actual).read_bytes() == BINARY


def resolved(tmp_path: Path, payload: dict[str, str]) -> tuple[Path, Path]:
    """resolve_payload for a release whose core payload is this one file."""
    release = write_release(tmp_path, lambda d: d["components"]["core"].update(
        payload={"files": [{"install": "/usr/bin/microshift", **payload}]}))
    ctx = Context(build_dir=tmp_path / "build", release_path=release,
                  progress=Progress(stream=io.StringIO()))
    [file] = ctx.release.payload_for("x86_64")
    scratch = tmp_path / "scratch"
    return resolve_payload(ctx, "core", (file,), scratch, "x86_64")[file], scratch


def test_a_local_payload_is_used_where_it_is(tmp_path: Path) -> None:
    local = tmp_path / "microshift"
    local.write_bytes(BINARY)
    path, _ = resolved(tmp_path, {"path": str(local)})
    assert path == local


def test_a_sample_payload_is_generated_in_scratch_space_for_this_version(tmp_path: Path) -> None:
    path, scratch = resolved(tmp_path, {"sample": "microshift"})
    assert path == scratch / "payloads" / "core" / "usr_bin_microshift"
    assert path.read_bytes() == payload_standin("microshift", "4.14.2")
    assert not (tmp_path / "build").exists()  # nothing of it in the build directory


def test_a_verified_payload_is_packaged_and_downloaded_once(
        tmp_path: Path, server: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    base, served = server
    release = url_release(tmp_path, f"{base}/microshift", hashlib.sha256(BINARY).hexdigest())
    build = tmp_path / "build"
    Handler.watch = build / "cache/payloads"
    for _ in range(2):
        assert run_cli("--release", release, "rpms", "--build-dir", build) == 0
    assert served == ["/microshift"]  # the second run takes it from the cache
    # The download goes to a hidden temporary file beside its final name (an atomic
    # rename on one file system; an interrupted run leaves no file under the final name).
    [during] = Handler.seen
    assert len(during) == 1 and during[0].startswith(".download-")
    err = capsys.readouterr().err
    assert err.count(f"==> download {base}/microshift") == 1 and f"{len(BINARY)} bytes" in err
    cached = build / "cache/payloads" / hashlib.sha256(BINARY).hexdigest()
    assert cached.read_bytes() == BINARY


def test_an_unreachable_payload_is_one_error_naming_field_and_url(
        tmp_path: Path, server: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    base, _ = server
    release = url_release(tmp_path, f"{base}/gone", "a" * 64)
    assert run_cli("--release", release, "rpms", "--build-dir", tmp_path / "build") == 1
    err = capsys.readouterr().err
    assert f"error: cannot download components.core.payload.files[1] from {base}/gone: " \
           f"404 Client Error" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(("data", "machine"), [
    (print_and_exit("x86_64", "x\n"), "x86_64"),
    (print_and_exit("aarch64", "x\n"), "aarch64"),
    (b"\x7fELF\x02\x02\x01" + bytes(11) + (22).to_bytes(2, "big"), "s390x"),  # big-endian
    (b"\x7fELF\x02\x01\x01" + bytes(11) + (999).to_bytes(2, "little"), "ELF machine 999"),
    (b"#!/bin/sh\nexec microshift-real \"$@\"\n", None),  # a script runs anywhere
    (b"\x7fELF\x02\x01\x01", None),  # too short to say
])
def test_the_machine_of_an_executable_is_read_from_its_elf_header(
        tmp_path: Path, data: bytes, machine: str | None) -> None:
    (tmp_path / "payload").write_bytes(data)
    assert elf_machine(tmp_path / "payload") == machine


def machine_release(tmp_path: Path, architectures: list[str], arch: str) -> tuple[Path, Path]:
    """A release whose core payload is one static `arch` executable."""
    binary = tmp_path / f"microshift-{arch}"
    binary.write_bytes(print_and_exit(arch, "microshift\n"))
    binary.chmod(0o755)
    return write_release(tmp_path, lambda d: (
        d.update(architectures=architectures),
        d["components"]["core"].update(payload={"path": str(binary)}))), binary


def test_an_executable_for_another_architecture_is_refused_before_any_build(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    release, binary = machine_release(tmp_path, ["aarch64"], "x86_64")
    build = tmp_path / "build"
    assert run_cli("--release", release, "rpms", "--build-dir", build) == 2
    assert capsys.readouterr().err.splitlines()[-2:] == [
        f"error: {release}: components.core.payload: {binary} is an x86_64 executable, but it "
        "is packaged for aarch64", "hint: use an aarch64 build of /usr/bin/microshift"]
    assert not [p for p in built_files(build) if p.suffix == ".rpm"]


@pytest.mark.parametrize("arch", [None, "x86_64"])
def test_one_executable_for_two_architectures_is_refused_unless_one_is_built(
        tmp_path: Path, arch: str | None) -> None:
    release, binary = machine_release(tmp_path, ["x86_64", "aarch64"], "x86_64")
    ctx = Context(build_dir=tmp_path / "build", release_path=release,
                  progress=Progress(stream=io.StringIO()), arch=arch)
    [file] = ctx.release.payload_for("x86_64")
    for build_arch in ctx.release.architectures:
        if arch is None and build_arch == "aarch64":
            with pytest.raises(InputError) as caught:
                resolve_payload(ctx, "core", (file,), tmp_path / "scratch", build_arch)
            assert str(caught.value) == (
                f"{release}: components.core.payload: {binary} is an x86_64 executable, but "
                "it is packaged for aarch64 (hint: one payload serves every architecture of "
                "the release: give each its own under components.core.payload (x86_64: "
                "{...}, aarch64: {...}), or build only x86_64 here (--arch x86_64))")
        else:
            assert resolve_payload(ctx, "core", (file,), tmp_path / "scratch",
                                   build_arch)[file] == binary


S390X = b"\x7fELF\x02\x02\x01" + bytes(11) + (22).to_bytes(2, "big")  # an ELF header's start


@pytest.mark.parametrize(("form", "packaged_for"), [("single", "x86_64, aarch64"),
                                                    ("per-arch", "x86_64")])
def test_a_foreign_executable_is_named_with_the_architectures_it_would_serve(
        tmp_path: Path, form: str, packaged_for: str) -> None:
    """The single form packages its file for every architecture; a per-architecture entry
    for its own only, and the error names that entry."""
    binary = tmp_path / "microshift-s390x"
    binary.write_bytes(S390X)
    entry = {"files": [{"install": "/usr/bin/microshift", "path": str(binary)}]}
    payload = entry if form == "single" else {"x86_64": entry,
                                              "aarch64": {"sample": "microshift"}}
    release = write_release(tmp_path, lambda d: (
        d.update(architectures=["x86_64", "aarch64"]),
        d["components"]["core"].update(payload=payload)))
    ctx = Context(build_dir=tmp_path / "build", release_path=release,
                  progress=Progress(stream=io.StringIO()))
    field = "components.core.payload" + (".x86_64" if form == "per-arch" else "")
    with pytest.raises(InputError) as caught:
        resolve_payload(ctx, "core", ctx.release.payload_for("x86_64"), tmp_path / "s",
                        "x86_64")
    assert str(caught.value) == (
        f"{release}: {field}.files[0]: {binary} is an s390x executable, but it is packaged "
        f"for {packaged_for} (hint: use an x86_64 build of /usr/bin/microshift)")


def arch_release(tmp_path: Path, aarch64: dict[str, str]) -> Context:
    """A release of x86_64 and aarch64 whose payload is named per architecture."""
    x86 = tmp_path / "microshift-x86_64"
    x86.write_bytes(print_and_exit("x86_64", "microshift\n"))
    release = write_release(tmp_path, lambda d: (
        d.update(architectures=["x86_64", "aarch64"]),
        d["components"]["core"].update(payload={"x86_64": {"path": str(x86)},
                                                "aarch64": aarch64})))
    return Context(build_dir=tmp_path / "build", release_path=release,
                   progress=Progress(stream=io.StringIO()))


def test_every_architectures_payload_is_checked_before_any_work(
        tmp_path: Path, server: tuple[str, list[str]]) -> None:
    base, served = server
    arm = print_and_exit("aarch64", "microshift\n")
    Handler.body = arm
    ctx = arch_release(tmp_path, {"url": f"{base}/microshift",
                                  "sha256": hashlib.sha256(arm).hexdigest()})
    check_payloads(ctx)
    assert served == ["/microshift"]  # the second architecture's too, not only the first's
    assert built_files(tmp_path / "build") == [
        tmp_path / "build/cache/payloads" / hashlib.sha256(arm).hexdigest()]


def test_an_architectures_payload_built_for_another_is_named_by_its_field(
        tmp_path: Path) -> None:
    x86_again = tmp_path / "microshift-also-x86_64"
    x86_again.write_bytes(print_and_exit("x86_64", "microshift\n"))
    ctx = arch_release(tmp_path, {"path": str(x86_again)})
    with pytest.raises(InputError) as refused:
        check_payloads(ctx)
    assert (refused.value.path, refused.value.field, refused.value.problem) == (
        str(ctx.release_path), "components.core.payload.aarch64",
        f"{x86_again} is an x86_64 executable, but it is packaged for aarch64")
    assert refused.value.hint == "use an aarch64 build of /usr/bin/microshift"
    assert built_files(tmp_path / "build") == []  # the check writes nothing
