"""RPMs for a release of two architectures: arch-specific packages once per architecture,
noarch packages once for both, one repository per architecture (DIR/repo/ARCH) holding its
own and the noarch packages; the SAMPLE base for both, so each architecture's blueprint
depsolves (README "Outputs", issue 13)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.cli import RELEASE, run_cli

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def two_arch_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("two-arch")
    data = yaml.safe_load(RELEASE.read_text())
    data["architectures"] = ["x86_64", "aarch64"]
    release = root / "release.yaml"
    release.write_text(yaml.safe_dump(data, sort_keys=False))
    assert run_cli("--release", release, "build-image", "--build-dir", root / "build",
                   "--image", "microshift-full", "--until", "blueprint") == 0
    return root / "build"


def _arches(build: Path) -> list[tuple[str, str]]:
    out = subprocess.run(["rpm", "-qp", "--qf", "%{NAME} %{ARCH}\n",
                          *sorted(map(str, (build / "rpms").glob("*.rpm")))],
                         capture_output=True, text=True, check=True).stdout
    return sorted(tuple(line.split()) for line in out.splitlines())  # type: ignore[misc]


def test_core_is_built_per_architecture_and_noarch_packages_once(two_arch_build: Path) -> None:
    arches = _arches(two_arch_build)
    assert ("microshift-core", "x86_64") in arches and ("microshift-core", "aarch64") in arches
    names = [name for name, _ in arches]
    noarch = [name for name, arch in arches if arch == "noarch"]
    assert noarch and all(names.count(name) == 1 for name in noarch)
    assert {arch for _, arch in arches} == {"x86_64", "aarch64", "noarch"}


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_each_architecture_has_a_repository_of_its_own(two_arch_build: Path, arch: str) -> None:
    import solv

    pool = solv.Pool()
    pool.setarch(arch)
    repo = pool.add_repo("project")
    [primary] = (two_arch_build / "repo" / arch / "repodata").glob("*primary.xml*")
    handle = solv.xfopen(str(primary))
    repo.add_rpmmd(handle, None)
    handle.close()
    pool.createwhatprovides()
    listed = {(s.name, s.arch) for s in repo.solvables}
    assert {(s.name, s.arch) for s in repo.solvables if s.installable()} == listed
    assert ("microshift-core", arch) in listed
    assert {a for _, a in listed} == {arch, "noarch"}
    noarch = {name for name, a in _arches(two_arch_build) if a == "noarch"}
    assert {name for name, a in listed if a == "noarch"} == noarch
    files = sorted(p.name for p in (two_arch_build / "repo" / arch / "Packages").glob("*"))
    assert files == sorted(f"{name}-4.14.2-1.{a}.rpm" for name, a in listed)


def test_the_sample_base_has_each_architectures_kernel_and_loader(two_arch_build: Path) -> None:
    rpms = sorted(map(str, (two_arch_build / "sample-base" / "rpms").glob("*.rpm")))
    files = subprocess.run(["rpm", "-qpl", *rpms], capture_output=True, text=True,
                           check=True).stdout.split()
    provides = subprocess.run(["rpm", "-qp", "--provides", *rpms], capture_output=True,
                              text=True, check=True).stdout
    for arch, loader in (("x86_64", "ld-linux-x86-64.so.2"), ("aarch64", "ld-linux-aarch64.so.1")):
        assert f"/usr/lib/modules/5.14.0-284.sample.el9.{arch}/vmlinuz" in files
        assert f"{loader}()(64bit)" in provides


@pytest.mark.parametrize(("lock", "arch"), [("microshift-full.x86_64.lock.json", "x86_64"),
                                            ("microshift-full.aarch64.lock.json", "aarch64")])
def test_each_architecture_depsolves_to_its_own_packages(two_arch_build: Path, lock: str,
                                                         arch: str) -> None:
    packages = json.loads((two_arch_build / "blueprints" / lock).read_text())["packages"]
    assert {p["arch"] for p in packages} == {arch, "noarch"}
    assert f"microshift-core-4.14.2-1.{arch}" in {p["nevra"] for p in packages}
