"""A core payload per architecture (issue 13): a real aarch64 executable (ruff's, from its
PyPI wheel pinned by sha256, downloaded once into pytest's cache) is packaged in the
aarch64 microshift-core only, and an x86_64 executable given for aarch64 stops the build.
The whole two-architecture chain is tested in tests/test_architectures.py."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.update_size import fetch_executable
from builder.sources.samples import payload_standin
from tests.support.cli import RELEASE, extract_rpm, rpm_query, run_cli

pytestmark = pytest.mark.integration


RUFF = "0.17.5"
# sha256 of the executable in ruff 0.17.5's manylinux_2_17_aarch64 wheel (bench/update_size.py
# pins the wheel itself by its sha256).
RUFF_AARCH64 = "0ed0475e21ff8ef06e2705dc2040585bbfec8cbbbb60cf83492635cd853247f4"
CORE = "microshift-core-4.14.2-1"


@pytest.fixture(scope="session")
def downloads(request: pytest.FixtureRequest,
              tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pytest's cache (kept between runs, git-ignored), or a temporary directory when the
    cache plugin is off (`-p no:cacheprovider`)."""
    cache = getattr(request.config, "cache", None)
    return cache.mkdir("ruff-wheels") if cache is not None else \
        tmp_path_factory.mktemp("ruff-wheels")


def per_arch_release(root: Path, payload: dict[str, Any]) -> Path:
    data = yaml.safe_load(RELEASE.read_text())
    data["architectures"] = ["x86_64", "aarch64"]
    data["components"]["core"]["payload"] = payload
    release = root / "release.yaml"
    release.write_text(yaml.safe_dump(data, sort_keys=False))
    return release


def sample_files() -> dict[str, Any]:
    return yaml.safe_load(RELEASE.read_text())["components"]["core"]["payload"]


@pytest.fixture(scope="module")
def real_aarch64_build(tmp_path_factory: pytest.TempPathFactory, downloads: Path) -> Path:
    """x86_64: the sample's four stand-ins; aarch64: the real executable and one stand-in."""
    executable = fetch_executable(RUFF, downloads, "aarch64")
    root = tmp_path_factory.mktemp("real-aarch64")
    release = per_arch_release(root, {"x86_64": sample_files(), "aarch64": {"files": [
        {"install": "/usr/bin/microshift", "path": str(executable), "sha256": RUFF_AARCH64},
        {"install": "/usr/bin/microshift-etcd", "sample": "microshift-etcd"}]}})
    assert run_cli("--release", release, "rpms", "--build-dir", root / "build") == 0
    return root / "build"


def test_a_real_aarch64_executable_is_the_aarch64_packages_microshift(
        real_aarch64_build: Path, tmp_path: Path) -> None:
    rpm = real_aarch64_build / "rpms" / f"{CORE}.aarch64.rpm"
    assert rpm_query("-qp", "--qf", "%{ARCH}", rpm) == "aarch64"
    files = extract_rpm(rpm, tmp_path)
    binary = (files / "usr/bin/microshift").read_bytes()
    assert hashlib.sha256(binary).hexdigest() == RUFF_AARCH64
    assert sorted(p.name for p in (files / "usr/bin").iterdir() if p.name.startswith(
        "microshift-") and p.name != "microshift-components") == ["microshift-etcd"]
    # rpm's dependency generator read its ELF dependencies: glibc's aarch64 symbol versions
    # (the port began at 2.17; x86_64's begin at 2.2.5).
    assert "libc.so.6(GLIBC_2.17)(64bit)" in rpm_query("-qp", "--requires", rpm).split()


def test_the_x86_64_package_keeps_its_own_payload(real_aarch64_build: Path,
                                                  tmp_path: Path) -> None:
    rpm = real_aarch64_build / "rpms" / f"{CORE}.x86_64.rpm"
    files = extract_rpm(rpm, tmp_path)
    assert (files / "usr/bin/microshift").read_bytes() == payload_standin("microshift", "4.14.2")
    assert (files / "usr/bin/microshift-sos-report").is_file()
    specs = real_aarch64_build / "specs"
    assert "microshift-sos-report" in (specs / "microshift-core.x86_64.spec").read_text()
    assert "microshift-sos-report" not in (specs / "microshift-core.aarch64.spec").read_text()


def test_changing_only_the_aarch64_payload_rebuilds_only_the_aarch64_core(
        real_aarch64_build: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build = tmp_path / "build"
    shutil.copytree(real_aarch64_build, build, symlinks=True)
    release = per_arch_release(tmp_path, {"x86_64": sample_files(),
                                          "aarch64": {"sample": "microshift"}})
    capsys.readouterr()
    assert run_cli("--release", release, "rpms", "--build-dir", build, "--no-lint") == 0
    err = capsys.readouterr().err
    assert "rpm:microshift-core.x86_64: unchanged" in err
    assert [line.split()[1] for line in err.splitlines() if line.strip().startswith("wrote ")] \
        == [f"{CORE}.aarch64.rpm"]
    files = extract_rpm(build / "rpms" / f"{CORE}.aarch64.rpm", tmp_path / "new")
    assert (files / "usr/bin/microshift").read_bytes() == payload_standin("microshift", "4.14.2")


@pytest.mark.parametrize("command", ["rpms", "build-image"])
def test_an_x86_64_executable_as_the_aarch64_payload_stops_with_exit_2(
        tmp_path: Path, downloads: Path, command: str) -> None:
    executable = fetch_executable(RUFF, downloads)  # the x86_64 wheel's
    release = per_arch_release(tmp_path, {"x86_64": {"path": str(executable)},
                                          "aarch64": {"path": str(executable)}})
    build = tmp_path / "build"
    proc = subprocess.run([sys.executable, "-m", "builder", "--release", str(release), command,
                           "--build-dir", str(build)], capture_output=True, text=True,
                          check=False, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-2:] == [
        f"error: {release}: components.core.payload.aarch64: {executable} is an x86_64 "
        "executable, but it is packaged for aarch64",
        "hint: use an aarch64 build of /usr/bin/microshift"]
    assert "Traceback" not in proc.stderr
    # Stopped before any work: no RPM, and build-image built no SAMPLE base either.
    assert not list(build.rglob("*.rpm"))
