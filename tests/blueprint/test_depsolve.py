"""libsolv depsolve against a tiny real repository (rpmfluff specs, rpmbuild, createrepo_c)."""

from __future__ import annotations

import functools
import hashlib
import http.server
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from builder.blueprint.depsolve import RepoSource, depsolve
from builder.core.errors import BuildError
from builder.core.runner import Runner
from builder.rpm.rpmbuild import build_spec, createrepo

pytestmark = pytest.mark.integration

EPOCH = 1700000000


@dataclass(frozen=True)
class Pkg:
    name: str
    version: str = "1.0"
    provides: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)


# A miniature of the real package set: a core with a library dependency, two networking
# providers that Provide and Conflict the same capability, and a package whose Requires
# nothing satisfies.
PACKAGES = (
    # A file dependency outside */bin/ and /etc/: only filelists.xml lists such files.
    Pkg("core", "4.14.2", requires=("runtime", "/usr/share/helper-tools/helper.sh")),
    Pkg("runtime", "9.2"),
    Pkg("helper-tools", "9.2", files={"/usr/share/helper-tools/helper.sh": "data\n"}),
    Pkg("net-ovnk", "4.14.2", provides=("net-provider = 4.14.2",), conflicts=("net-provider",),
        requires=("core",)),
    Pkg("net-bridge", "4.14.2", provides=("net-provider = 4.14.2",),
        conflicts=("net-provider",), requires=("core",)),
    Pkg("needs-ghost", "1.0", requires=("ghost-library >= 2",)),
)


def _build(pkg: Pkg, topdir: Path) -> list[Path]:
    import rpmfluff

    build = rpmfluff.SimpleRpmBuild(pkg.name, pkg.version, "1", buildArchs=["x86_64"])
    build.add_summary(f"test package {pkg.name}")
    for cap in pkg.provides:
        build.add_provides(cap)
    for cap in pkg.conflicts:
        build.add_conflicts(cap)
    for cap in pkg.requires:
        build.add_requires(cap)
    for index, (path, content) in enumerate(sorted(pkg.files.items())):
        build.add_installed_file(path.lstrip("/"), rpmfluff.SourceFile(f"f{index}", content),
                                 mode="0644")
    (topdir / "SOURCES").mkdir(parents=True, exist_ok=True)
    build.gather_sources(str(topdir / "SOURCES"))
    spec = Path(build.gather_spec_file(str(topdir)))
    return build_spec(Runner(), spec, topdir, "x86_64", EPOCH)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A yum repository of PACKAGES, built for real."""
    root = tmp_path_factory.mktemp("tiny-repo")
    rpms: list[Path] = []
    for pkg in PACKAGES:
        rpms += _build(pkg, root / "topdir" / pkg.name)
    createrepo(Runner(), rpms, root / "repo", EPOCH)
    return root / "repo"


def source(path: Path, name: str = "tiny") -> list[RepoSource]:
    return [RepoSource(name, "path", str(path))]


def test_resolves_exact_versions_with_dependencies_into_lock_entries(repo: Path,
                                                                     tmp_path: Path) -> None:
    locked = depsolve([("core", "4.14.2-1"), ("net-ovnk", "4.14.2-1")], source(repo),
                      "x86_64", tmp_path)
    names = [p.name for p in locked]
    assert names == sorted(names)
    assert set(names) == {"core", "runtime", "helper-tools", "net-ovnk"}
    core = next(p for p in locked if p.name == "core")
    assert core.nevra == "core-4.14.2-1.x86_64"
    assert core.repo == "tiny"
    rpm_file = repo / core.location
    assert rpm_file.is_file()
    assert core.checksum == "sha256:" + hashlib.sha256(rpm_file.read_bytes()).hexdigest()


def test_two_networking_providers_conflict_naming_both(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(BuildError) as err:
        depsolve([("core", "4.14.2-1"), ("net-ovnk", "4.14.2-1"), ("net-bridge", "4.14.2-1")],
                 source(repo), "x86_64", tmp_path)
    message = str(err.value)
    assert message.startswith("depsolve failed for x86_64: 1 problem(s)\n")
    # Either order: libsolv names the package it tried first.
    assert ("package net-ovnk-4.14.2-1.x86_64 conflicts with net-provider provided by "
            "net-bridge-4.14.2-1.x86_64" in message) or \
        ("package net-bridge-4.14.2-1.x86_64 conflicts with net-provider provided by "
         "net-ovnk-4.14.2-1.x86_64" in message)


def test_package_that_does_not_exist(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(BuildError) as err:
        depsolve([("core", "4.14.2-1"), ("no-such-package", "1.0-1")], source(repo),
                 "x86_64", tmp_path)
    assert "no-such-package" in str(err.value)
    assert "no repository has a package of that name" in str(err.value)


def test_version_that_does_not_exist_lists_what_is_available(repo: Path,
                                                             tmp_path: Path) -> None:
    with pytest.raises(BuildError) as err:
        depsolve([("core", "4.15.0-1")], source(repo), "x86_64", tmp_path)
    assert "core: version 4.15.0-1 is not available" in str(err.value)
    assert "4.14.2-1" in str(err.value)


def test_unsatisfied_requires_names_package_and_dependency(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(BuildError) as err:
        depsolve([("needs-ghost", "1.0-1")], source(repo), "x86_64", tmp_path)
    message = str(err.value)
    assert "needs-ghost-1.0-1.x86_64" in message
    assert "ghost-library >= 2" in message


def test_version_globs_and_unversioned_entries(repo: Path, tmp_path: Path) -> None:
    locked = depsolve([("core", "4.14.*"), ("runtime", "*")], source(repo), "x86_64", tmp_path)
    assert {p.name for p in locked} == {"core", "runtime", "helper-tools"}


def test_missing_repository_points_at_the_command_that_builds_it(tmp_path: Path) -> None:
    sources = [RepoSource("microshift", "project", str(tmp_path / "repo"))]
    with pytest.raises(BuildError) as err:
        depsolve([("core", "")], sources, "x86_64", tmp_path)
    assert "has no repodata/repomd.xml" in str(err.value)
    assert err.value.hint is not None and "builder rpms" in err.value.hint


def test_metadata_that_does_not_match_repomd_is_refused(repo: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy)
    primary = next((copy / "repodata").glob("*-primary.xml*"))
    primary.write_bytes(primary.read_bytes() + b"\0")
    with pytest.raises(BuildError) as err:
        depsolve([("core", "")], source(copy), "x86_64", tmp_path / "cache")
    assert "does not match the sha256 checksum in repomd.xml" in str(err.value)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def served(repo: Path) -> Iterator[tuple[str, list[str]]]:
    """The repository over real HTTP on localhost; yields (base URL, requested paths)."""
    requested: list[str] = []

    class Handler(_QuietHandler):
        def do_GET(self) -> None:
            requested.append(self.path)
            super().do_GET()

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(repo)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", requested
    finally:
        server.shutdown()
        thread.join()


def test_url_repository_is_downloaded_verified_and_cached(served: tuple[str, list[str]],
                                                          tmp_path: Path) -> None:
    url, requested = served
    sources = [RepoSource("remote", "url", url)]
    first = depsolve([("core", "4.14.2-1")], sources, "x86_64", tmp_path)
    assert {p.name for p in first} == {"core", "runtime", "helper-tools"}
    assert all(p.repo == "remote" for p in first)
    assert sum("primary" in path for path in requested) == 1
    requested.clear()
    again = depsolve([("core", "4.14.2-1")], sources, "x86_64", tmp_path)
    assert again == first
    # Only repomd.xml is fetched again: primary and filelists come from the cache.
    assert requested == ["/repodata/repomd.xml"]


def test_unreachable_url_repository_is_one_clear_error(tmp_path: Path) -> None:
    url = "http://127.0.0.1:9/nothing-here/"
    with pytest.raises(BuildError) as err:
        depsolve([("core", "")], [RepoSource("remote", "url", url)], "x86_64", tmp_path)
    assert f"cannot download {url}repodata/repomd.xml" in str(err.value)


def _recompress_to_zstd(repo: Path) -> None:
    """Rewrite a repository's gzip metadata as zstd (createrepo_c >= 1.0's default, which
    older createrepo_c cannot produce), fixing locations and checksums in repomd.xml."""
    import gzip
    import subprocess

    repomd = repo / "repodata" / "repomd.xml"
    text = repomd.read_text()
    for old in sorted((repo / "repodata").glob("*.xml.gz")):
        plain = gzip.decompress(old.read_bytes())
        packed = subprocess.run(["zstd", "-q", "-c"], input=plain, capture_output=True,
                                check=True).stdout
        digest = hashlib.sha256(packed).hexdigest()
        new = old.with_name(f"{digest}-{old.name.split('-', 1)[1][:-3]}.zst")
        new.write_bytes(packed)
        text = text.replace(old.name, new.name)
        text = text.replace(hashlib.sha256(old.read_bytes()).hexdigest(), digest)
        old.unlink()
    repomd.write_text(text)


@pytest.mark.parametrize("compression", ["xz", "bz2", "zstd"])
def test_compressed_metadata_of_every_kind(repo: Path, tmp_path: Path,
                                           compression: str) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, ignore=shutil.ignore_patterns("repodata"))
    if compression == "zstd":
        createrepo(Runner(), [], copy, EPOCH)
        _recompress_to_zstd(copy)
    else:
        Runner().run(["createrepo_c", "--quiet", "--no-database",
                      f"--general-compress-type={compression}", str(copy)])
    assert next((copy / "repodata").glob(f"*-primary.xml.{compression[:3]}"))
    locked = depsolve([("core", "4.14.2-1")], source(copy), "x86_64", tmp_path / "cache")
    assert {p.name for p in locked} == {"core", "runtime", "helper-tools"}


def test_base_repositories_are_named_per_architecture(repo: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`{arch}` (or dnf's `$basearch`) in a base repository names each architecture's."""
    import yaml

    from builder.blueprint.depsolve import repo_sources
    from builder.release.model import load_release
    from tests.support.cli import RELEASE, run_cli

    shutil.copytree(repo, tmp_path / "mirror" / "x86_64")
    data = yaml.safe_load(RELEASE.read_text())
    data["architectures"] = ["x86_64", "aarch64"]
    data["base"] = {"repos": [{"name": "baseos", "path": "mirror/{arch}"},
                              {"name": "appstream", "url": "https://mirror.example/$basearch/"}]}
    release = tmp_path / "release.yaml"
    release.write_text(yaml.safe_dump(data))
    # The aarch64 mirror is missing: refused before any work, naming it.
    assert run_cli("--release", release, "blueprint", "--image", "microshift-full",
                   "--build-dir", tmp_path / "build") == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        f"error: {release}: base.repos[0].path: {tmp_path}/mirror/aarch64 is not a yum "
        "repository (no repodata)")
    shutil.copytree(repo, tmp_path / "mirror" / "aarch64")
    loaded = load_release(release)
    build = tmp_path / "build"
    for arch in ("x86_64", "aarch64"):
        assert [(s.name, s.location) for s in repo_sources(build, loaded, arch)] == [
            ("microshift", str(build / "repo" / arch)),
            ("baseos", str(tmp_path / "mirror" / arch)),
            ("appstream", f"https://mirror.example/{arch}/")]
