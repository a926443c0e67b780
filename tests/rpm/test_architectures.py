"""RPMs for a release of two architectures: arch-specific packages once per architecture,
noarch packages once for both, in one repository libsolv reads per architecture
(README "Outputs"; issue 13's first step)."""

from __future__ import annotations

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
    assert run_cli("--release", release, "rpms", "--build-dir", root / "build") == 0
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
def test_libsolv_offers_each_architecture_its_own_core(two_arch_build: Path, arch: str) -> None:
    import solv

    pool = solv.Pool()
    pool.setarch(arch)
    repo = pool.add_repo("project")
    [primary] = (two_arch_build / "repo" / "repodata").glob("*primary.xml*")
    handle = solv.xfopen(str(primary))
    repo.add_rpmmd(handle, None)
    handle.close()
    pool.createwhatprovides()
    offered = {(s.name, s.arch) for s in repo.solvables if s.installable()}
    assert ("microshift-core", arch) in offered
    assert {a for _, a in offered} == {arch, "noarch"}
    assert len(offered) == len(list(repo.solvables)) - 1  # all but the other core
