"""A release of x86_64 and aarch64, end to end on one machine (issue 13): arch-specific
packages once per architecture and noarch ones once, a repository per architecture, a lock
per architecture, a commit per architecture on its own ref (composed without running any
aarch64 program), deltas, SBOMs and installer ISOs for both; a run narrowed to one
architecture builds the same bytes; an aarch64 device installs and updates its commit."""

from __future__ import annotations

import base64
import json
import platform
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from builder.device.sysroot import can_run
from tests.support import requires
from tests.support.cli import PROJECT_ROOT, RELEASE
from tests.support.ostree import copy_build, head

pytestmark = [pytest.mark.integration,
              requires.root_only("build-image composes, which runs rpm --root")]

ARCHES = ("x86_64", "aarch64")
GOARCH = {"x86_64": "amd64", "aarch64": "arm64"}
IMAGE = "microshift-full"


@dataclass(frozen=True)
class TwoArch:
    release: Path
    build: Path
    log: str

    def ref(self, arch: str) -> str:
        return f"microshift/{arch}/{IMAGE}"

    @property
    def repo(self) -> Path:
        return self.build / "ostree" / "repo"


def two_arch_release(directory: Path, release: str = "1") -> Path:
    data = yaml.safe_load(RELEASE.read_text())
    data["architectures"] = list(ARCHES)
    data["release"] = release
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "release.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def two_arch(tmp_path_factory: pytest.TempPathFactory) -> TwoArch:
    root = tmp_path_factory.mktemp("two-arch")
    release = two_arch_release(root)
    build = root / "build"
    # Composing the other architecture's tree must run none of its programs: this machine is
    # made unable to run them (qemu's handler switched off) for the whole build.
    foreign = next(arch for arch in ARCHES if arch != platform.machine())
    with foreign_programs_off(foreign):
        proc = _build_image(release, build)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return TwoArch(release, build, proc.stderr)


@contextmanager
def foreign_programs_off(arch: str) -> Iterator[None]:
    """Disable the kernel's binfmt_misc handler for `arch` (qemu-user-static's), if any."""
    handler = Path("/proc/sys/fs/binfmt_misc") / f"qemu-{arch}"
    enabled = can_run(arch) and platform.machine() != arch
    if enabled:
        handler.write_text("0")
    try:
        assert not can_run(arch) or platform.machine() == arch
        yield
    finally:
        if enabled:
            handler.write_text("1")


def _build_image(release: Path, build: Path, *extra: str,
                 until: str = "installer") -> subprocess.CompletedProcess[str]:
    return _builder("--release", release, *extra, "build-image", "--image", IMAGE,
                    "--build-dir", build, "--until", until)


def _builder(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """`python -m builder` in a child process: its stderr is the run's whole log."""
    return subprocess.run([sys.executable, "-m", "builder", *map(str, args)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, check=False)


def _arches(build: Path) -> list[tuple[str, str]]:
    out = subprocess.run(["rpm", "-qp", "--qf", "%{NAME} %{ARCH}\n",
                          *sorted(map(str, (build / "rpms").glob("*.rpm")))],
                         capture_output=True, text=True, check=True).stdout
    return sorted((name, arch) for name, arch in (line.split() for line in out.splitlines()))


def _ostree(*args: str | Path) -> str:
    return subprocess.run(["ostree", *map(str, args)], capture_output=True, text=True,
                          check=True).stdout


def test_core_is_built_per_architecture_and_noarch_packages_once(two_arch: TwoArch) -> None:
    arches = _arches(two_arch.build)
    assert ("microshift-core", "x86_64") in arches and ("microshift-core", "aarch64") in arches
    names = [name for name, _ in arches]
    noarch = [name for name, arch in arches if arch == "noarch"]
    assert noarch and all(names.count(name) == 1 for name in noarch)
    assert {arch for _, arch in arches} == {"x86_64", "aarch64", "noarch"}


@pytest.mark.parametrize("arch", ARCHES)
def test_each_architecture_has_a_repository_of_its_own(two_arch: TwoArch, arch: str) -> None:
    import solv

    pool = solv.Pool()
    pool.setarch(arch)
    repo = pool.add_repo("project")
    [primary] = (two_arch.build / "repo" / arch / "repodata").glob("*primary.xml*")
    handle = solv.xfopen(str(primary))
    repo.add_rpmmd(handle, None)
    handle.close()
    pool.createwhatprovides()
    listed = {(s.name, s.arch) for s in repo.solvables}
    assert {(s.name, s.arch) for s in repo.solvables if s.installable()} == listed
    assert ("microshift-core", arch) in listed
    assert {a for _, a in listed} == {arch, "noarch"}
    noarch = {name for name, a in _arches(two_arch.build) if a == "noarch"}
    assert {name for name, a in listed if a == "noarch"} == noarch
    files = sorted(p.name for p in (two_arch.build / "repo" / arch / "Packages").glob("*"))
    assert files == sorted(f"{name}-4.14.2-1.{a}.rpm" for name, a in listed)


def _dnf(build: Path, arch: str, scratch: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """dnf as a machine of `arch` sees the release: its repository and the SAMPLE base's."""
    return subprocess.run(
        ["dnf", f"--installroot={scratch / 'root'}", "--setopt=reposdir=/dev/null",
         f"--setopt=cachedir={scratch / 'cache'}", f"--forcearch={arch}", "--releasever=9",
         "--nogpgcheck", f"--repofrompath=microshift,{build / 'repo' / arch}",
         f"--repofrompath=base,{build / 'sample-base' / 'repo' / arch}",
         "--repo=microshift", "--repo=base", *args],
        capture_output=True, text=True, check=False)


@pytest.mark.parametrize("arch", ARCHES)
def test_dnf_installs_each_architecture_from_its_repositories(two_arch: TwoArch, arch: str,
                                                              tmp_path: Path) -> None:
    requires.need_tools("dnf")
    image = ("microshift-core", "microshift-networking-ovnk", "microshift-storage-topolvm")
    proc = _dnf(two_arch.build, arch, tmp_path, "install", "--assumeno", *image)
    assert "Operation aborted." in proc.stdout + proc.stderr, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith(" ")]
    planned = {(row[0], row[1]) for row in rows if len(row) >= 5
               and row[3] in ("microshift", "base")}
    assert ("microshift-core", arch) in planned
    assert {package_arch for _, package_arch in planned} == {arch, "noarch"}
    both = _dnf(two_arch.build, arch, tmp_path, "install", "--assumeno",
                "microshift-networking-ovnk", "microshift-networking-bridge")
    assert both.returncode != 0
    assert "conflicts with microshift-networking-provider" in both.stderr


def test_the_sample_base_has_each_architectures_kernel_and_loader(two_arch: TwoArch) -> None:
    rpms = sorted(map(str, (two_arch.build / "sample-base" / "rpms").glob("*.rpm")))
    files = subprocess.run(["rpm", "-qpl", *rpms], capture_output=True, text=True,
                           check=True).stdout.split()
    provides = subprocess.run(["rpm", "-qp", "--provides", *rpms], capture_output=True,
                              text=True, check=True).stdout
    for arch, loader in (("x86_64", "ld-linux-x86-64.so.2"), ("aarch64", "ld-linux-aarch64.so.1")):
        assert f"/usr/lib/modules/5.14.0-284.sample.el9.{arch}/vmlinuz" in files
        assert f"{loader}()(64bit)" in provides


@pytest.mark.parametrize("arch", ARCHES)
def test_each_architecture_depsolves_to_its_own_packages(two_arch: TwoArch, arch: str) -> None:
    lock = json.loads((two_arch.build / "blueprints" / f"{IMAGE}.{arch}.lock.json").read_text())
    assert lock["arch"] == arch and lock["ref"] == two_arch.ref(arch)
    assert {p["arch"] for p in lock["packages"]} == {arch, "noarch"}
    assert f"microshift-core-4.14.2-1.{arch}" in {p["nevra"] for p in lock["packages"]}


@pytest.mark.parametrize("arch", ARCHES)
def test_each_architecture_is_composed_onto_its_own_ref(two_arch: TwoArch, arch: str,
                                                        tmp_path: Path) -> None:
    refs = set(_ostree(f"--repo={two_arch.repo}", "refs").split())
    assert refs == {two_arch.ref(a) for a in ARCHES}
    commit = head(two_arch.repo, two_arch.ref(arch))
    assert commit is not None
    _ostree(f"--repo={two_arch.repo}", "fsck", commit)
    modules = _ostree(f"--repo={two_arch.repo}", "ls", "--nul-filenames-only", commit,
                      "/usr/lib/modules").split("\0")
    assert f"/usr/lib/modules/5.14.0-284.sample.el9.{arch}" in modules
    rpmdb = tmp_path / "rpmdb"
    _ostree(f"--repo={two_arch.repo}", "checkout", "--user-mode",
            "--subpath=/usr/lib/sysimage/rpm", commit, rpmdb)
    installed = subprocess.run(["rpm", "--dbpath", str(rpmdb), "-qa", "--qf",
                                "%{NAME}.%{ARCH}\n"], capture_output=True, text=True,
                               check=True).stdout.split()
    assert f"microshift-core.{arch}" in installed
    other = next(a for a in ARCHES if a != arch)
    assert not [name for name in installed if name.endswith(f".{other}")]


def _store_configs(repo: Path, commit: str, dest: Path) -> dict[str, dict[str, object]]:
    """Every image of the commit's embedded store: name -> its config (from the store)."""
    _ostree(f"--repo={repo}", "checkout", "--user-mode",
            "--subpath=/usr/share/containers/storage/overlay-images", commit, dest)
    configs = {}
    for record in json.loads((dest / "images.json").read_text()):
        # containers/storage keeps an image's big data in files named "=" + base64(key);
        # the config's key is the image id's digest.
        key = base64.b64encode(f"sha256:{record['id']}".encode()).decode()
        config = json.loads((dest / record["id"] / f"={key}").read_text())
        for name in record["names"]:
            configs[name] = config
    return configs


@pytest.mark.parametrize("arch", ARCHES)
def test_each_commit_embeds_its_architectures_images(two_arch: TwoArch, arch: str,
                                                     tmp_path: Path) -> None:
    from builder.release.model import load_release

    commit = head(two_arch.repo, two_arch.ref(arch))
    assert commit is not None
    configs = _store_configs(two_arch.repo, commit, tmp_path / "images")
    toml = (two_arch.build / "blueprints" / f"{IMAGE}.toml").read_text()
    cached = [img.ref for img in load_release(two_arch.release).images() if img.ref in toml]
    assert cached and sorted(configs) == sorted(cached)
    assert {config["architecture"] for config in configs.values()} == {GOARCH[arch]}


@pytest.mark.parametrize("arch", ARCHES)
def test_deltas_sbom_and_installer_per_architecture(two_arch: TwoArch, arch: str) -> None:
    commit = head(two_arch.repo, two_arch.ref(arch))
    report = json.loads((two_arch.build / "deltas" / two_arch.ref(arch) / "report.json")
                        .read_text())
    assert (report["ref"], report["to_commit"]) == (two_arch.ref(arch), commit)
    assert [path["from_commit"] for path in report["paths"]] == [None]  # from scratch
    assert (two_arch.build / "deltas" / two_arch.ref(arch) / report["paths"][0]["offline_file"]
            ).is_file()
    assert commit in _ostree(f"--repo={two_arch.repo}", "static-delta", "list")
    sbom = json.loads((two_arch.build / "sbom" / f"{IMAGE}-{arch}.spdx.json").read_text())
    assert f"{two_arch.ref(arch)}@{commit}" in json.dumps(sbom)
    iso = two_arch.build / "installer" / f"{IMAGE}-{arch}.iso"
    manifest = json.loads(iso.with_suffix(".json").read_text())
    assert (manifest["ref"], manifest["commit"]) == (two_arch.ref(arch), commit)
    assert not (two_arch.build / "installer" / f"{IMAGE}.iso").exists()


def test_a_second_run_rebuilds_nothing(two_arch: TwoArch) -> None:
    heads = {arch: head(two_arch.repo, two_arch.ref(arch)) for arch in ARCHES}
    proc = _build_image(two_arch.release, two_arch.build)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for arch in ARCHES:
        assert f"rpm:microshift-core.{arch}: unchanged" in proc.stderr
        assert f"repo:{arch}: unchanged" in proc.stderr
        assert f"compose {IMAGE} ({arch}): unchanged" in proc.stderr
        assert f"installer {IMAGE}-{arch}.iso: unchanged" in proc.stderr
        assert f"{two_arch.ref(arch)} = {heads[arch]} (unchanged: the ref already holds " \
               "this content)" in proc.stderr
    assert "tree: install packages" not in proc.stderr and "write ISO" not in proc.stderr
    assert {arch: head(two_arch.repo, two_arch.ref(arch)) for arch in ARCHES} == heads


def test_one_architecture_alone_builds_the_same_commit(two_arch: TwoArch,
                                                       tmp_path: Path) -> None:
    """What a CI matrix job of one architecture builds equals the full build's."""
    alone = tmp_path / "aarch64-only"
    proc = _build_image(two_arch.release, alone, "--arch", "aarch64", until="compose")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert head(alone / "ostree" / "repo", two_arch.ref("aarch64")) == \
        head(two_arch.repo, two_arch.ref("aarch64"))
    assert head(alone / "ostree" / "repo", two_arch.ref("x86_64")) is None
    for rpm in sorted((alone / "rpms").glob("*.rpm")):
        assert rpm.read_bytes() == (two_arch.build / "rpms" / rpm.name).read_bytes(), rpm.name


def test_an_aarch64_device_installs_and_updates_its_commit(two_arch: TwoArch,
                                                           tmp_path: Path) -> None:
    if not can_run("aarch64"):
        pytest.skip("missing tool: qemu-user-static's aarch64 binfmt handler (ostree runs the "
                    "deployment's semodule on upgrade; `bash ci/install-host-tools.sh` "
                    "installs and registers it)")
    build = copy_build(two_arch.build, tmp_path / "build")
    release2 = two_arch_release(tmp_path / "next", release="2")
    proc = _build_image(release2, build, "--arch", "aarch64", until="deltas")
    assert proc.returncode == 0, proc.stderr[-3000:]
    ref = two_arch.ref("aarch64")
    v1, v2 = head(two_arch.repo, ref), head(build / "ostree" / "repo", ref)
    assert v1 and v2 and v1 != v2
    report = tmp_path / "report.json"
    proc = _builder("--release", release2, "device", "simulate", "--scenario", "good-update",
                    "--build-dir", build, "--ref", ref, "--work-dir", tmp_path / "sim",
                    "--wait-timeout", "1", "--report-json", report)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"compose commits on {ref}" in proc.stderr
    outcome = json.loads(report.read_text())
    assert outcome["passed"] is True, outcome
