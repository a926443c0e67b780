"""--arch: one of the release's architectures per CI matrix job."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.context import Context
from builder.core.errors import InputError
from tests.support.cli import RELEASE, run_cli


def test_arch_narrows_the_release_to_that_architecture(tmp_path: Path) -> None:
    release = tmp_path / "release.yaml"
    release.write_text(RELEASE.read_text().replace("architectures: [x86_64]",
                                                   "architectures: [x86_64, aarch64]"))
    assert Context(tmp_path, release).release.architectures == ("x86_64", "aarch64")
    assert Context(tmp_path, release, arch="aarch64").release.architectures == ("aarch64",)


def test_an_architecture_the_release_does_not_have_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InputError, match="'aarch64' is not an architecture of"):
        _ = Context(tmp_path, RELEASE, arch="aarch64").release
    assert run_cli("--arch", "aarch64", "blueprint", "--image", "microshift-full",
                   "--build-dir", tmp_path) == 2
    assert "--arch: 'aarch64' is not an architecture of" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def two_arch_release(tmp_path: Path) -> Path:
    release = tmp_path / "release.yaml"
    release.write_text(RELEASE.read_text().replace("architectures: [x86_64]",
                                                   "architectures: [x86_64, aarch64]"))
    return release


def test_a_per_architecture_stage_sees_one_architecture_and_names_it(tmp_path: Path) -> None:
    ctx = Context(tmp_path, two_arch_release(tmp_path))
    arm = ctx.for_arch("aarch64")
    assert arm.release.architectures == ("aarch64",)
    assert arm.target_arch == "aarch64"
    assert arm.progress is ctx.progress and arm.runner is ctx.runner
    # Artifacts of a several-architecture release carry the architecture, narrowed or not.
    assert arm.release.arch_name("microshift-full", "aarch64") == "microshift-full-aarch64"
    narrowed = Context(tmp_path, ctx.release_path, arch="x86_64").release
    assert narrowed.declared_architectures == ("x86_64", "aarch64")
    assert narrowed.arch_name("img", "x86_64") == "img-x86_64"
    single = Context(tmp_path, RELEASE).release
    assert single.arch_name("img", "x86_64") == "img"
    with pytest.raises(InputError, match=r"'aarch64' is not an architecture of this run "
                                         r"\(x86_64\)"):
        ctx.for_arch("x86_64").for_arch("aarch64")


def test_an_explicit_ref_must_name_the_architecture_for_several(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    release = two_arch_release(tmp_path)
    build = tmp_path / "build"
    assert run_cli("--release", release, "compose", "--image", "microshift-full",
                   "--ref", "fleet/edge", "--build-dir", build) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        "error: command line: --ref: 'fleet/edge' would hold the commits of x86_64, aarch64")
    assert not build.exists()


def test_the_remote_backend_composes_one_architecture(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    release = two_arch_release(tmp_path)
    assert run_cli("--release", release, "composer", "compose", "--image", "microshift-full",
                   "--build-dir", tmp_path / "build") == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("error: command line: --arch: an Image Builder service composes for its "
                      "own architecture; the release builds x86_64, aarch64")
    assert err[1] == ("hint: run once per architecture with --arch ARCH, against a service on "
                      "a machine of that architecture")


def test_one_boot_iso_cannot_serve_two_architectures(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    release = two_arch_release(tmp_path)
    boot = tmp_path / "boot.iso"
    boot.write_bytes(b"")
    assert run_cli("--release", release, "installer", "--image", "microshift-full",
                   "--boot-iso", boot, "--build-dir", tmp_path / "build") == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        "error: command line: --boot-iso: a boot ISO boots one architecture; the release "
        "builds x86_64, aarch64")
