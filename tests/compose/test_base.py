"""Composing onto a production-style base: an existing edge commit from a repo path or URL."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from builder.compose.base import build_sample_tree, ensure_base
from builder.context import Context
from builder.core.children import gpg_agents, made_gnupg_homes
from builder.core.errors import ToolError
from builder.core.ostree import Repo
from builder.core.progress import Progress
from builder.core.runner import Runner
from tests.support import requires
from tests.support.deltas import signed_delta
from tests.support.ostree import RELEASE, cli, copy_build, head, ostree, serve
from tests.support.selinux import commit_labels

pytestmark = [
    pytest.mark.integration,
    requires.root_only("compose runs rpm --root and keeps ownership"),
]
VENDOR_REF = "rhel/9/x86_64/edge"


def make_vendor_repo(built_release: Path, work: Path,
                     adjust: Callable[[Path], None] | None = None) -> tuple[Path, str]:
    """An archive repo holding a base edge commit, standing in for a RHEL for Edge one;
    `adjust` changes its tree (as stored: /etc under /usr/etc) before the commit."""
    ctx = Context(build_dir=built_release, release_path=RELEASE, progress=Progress())
    tree = work / "tree"
    tree.mkdir(parents=True)
    build_sample_tree(ctx, sorted((built_release / "sample-base" / "rpms").glob("*.rpm")), tree)
    if adjust is not None:
        adjust(tree)
    repo = work / "repo"
    ostree(f"--repo={repo}", "init", "--mode=archive")
    ostree(f"--repo={repo}", "commit", f"--branch={VENDOR_REF}", f"--tree=dir={tree}",
           "--subject=vendor edge base")
    ostree(f"--repo={repo}", "summary", "-u")
    commit = head(repo, VENDOR_REF)
    assert commit
    return repo, commit


@pytest.fixture(scope="module")
def vendor_repo(built_release: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return make_vendor_repo(built_release, tmp_path_factory.mktemp("vendor"))


def _release_with_base(dest: Path, base: str) -> Path:
    path = dest / "release.yaml"
    path.write_text(RELEASE.read_text() + f"\nostree:\n  base: {base}\n  deltas_from: 2\n")
    return path


def _compose(build: Path, release: Path, image: str) -> int:
    assert cli("--release", release, "blueprint", "--image", image, "--build-dir", build) == 0
    return cli("--release", release, "compose", "--image", image, "--build-dir", build)


@pytest.mark.parametrize("transport", ["path", "url"])
def test_compose_layers_onto_an_existing_edge_commit(
        transport: str, vendor_repo: tuple[Path, str], built_release: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo, vendor_commit = vendor_repo
    build = copy_build(built_release, tmp_path / "build")
    with serve(repo) as (url, _):
        location = str(repo) if transport == "path" else url
        release = _release_with_base(tmp_path, f"{{repo: {location!r}, ref: {VENDOR_REF}}}")
        assert _compose(build, release, "microshift-minimal") == 0
    published = build / "ostree" / "repo"
    ref = ostree(f"--repo={published}", "refs").stdout.split()[0]
    commit = head(published, ref)
    shown = ostree(f"--repo={published}", "show", "--print-metadata-key=microshift.base",
                   str(commit)).stdout
    assert vendor_commit in shown
    subject = ostree(f"--repo={published}", "log", ref).stdout
    assert "SAMPLE" not in subject
    assert "NOT signing" in capsys.readouterr().err
    assert not list(published.glob("objects/*/*.commitmeta"))  # no key given: unsigned


def test_missing_unit_on_a_real_base_fails_with_the_blueprint_field(
        vendor_repo: tuple[Path, str], built_release: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo, _ = vendor_repo
    build = copy_build(built_release, tmp_path / "build")
    release = _release_with_base(tmp_path, f"{{repo: {str(repo)!r}, ref: {VENDOR_REF}}}")
    assert _compose(build, release, "microshift-full") == 1
    err = capsys.readouterr().err
    assert "customizations.services.enabled: openvswitch.service has no unit file" in err
    assert not (build / "ostree" / "repo" / "refs" / "heads" / "microshift").exists()


@pytest.mark.parametrize("trusted", ["release", "other"])
def test_a_url_base_verifies_with_its_gpg_key_in_a_gnupg_home_the_run_made(
        trusted: str, tmp_path: Path) -> None:
    """ostree verifies the base commit in a temporary GnuPG home of its own, made inside one
    the run recorded (children.tool_tmpdir): the commit signed with the release key is
    pulled, with another key it is refused, and no agent is left in a recorded home."""
    signed, *keys = signed_delta(tmp_path / "signed")
    key = dict(zip(("release", "other"), keys, strict=True))[trusted]
    build_repo = Repo(tmp_path / "build" / "repo", Runner())
    build_repo.init("archive")
    with serve(signed.repo) as (url, _):
        release = _release_with_base(tmp_path, f"{{repo: {url!r}, ref: test, "
                                               f"gpg_key: {str(key)!r}}}")
        ctx = Context(build_dir=tmp_path / "build", release_path=release, progress=Progress())
        if trusted == "release":
            assert ensure_base(ctx, build_repo, tmp_path / "work").checksum == signed.new
        else:
            with pytest.raises(ToolError, match="public key not found"):
                ensure_base(ctx, build_repo, tmp_path / "work")
    made = made_gnupg_homes()
    assert not [a for a in gpg_agents() if any(
        home in Path(os.path.realpath(a.homedir)).parents for home in made)]


def _metadata(repo: Path, commit: str, key: str) -> str:
    return ostree(f"--repo={repo}", "show", f"--print-metadata-key={key}",
                  commit).stdout.strip().strip("'")


def test_base_without_a_policy_composes_unlabelled_with_one_warning(
        built_release: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo, _ = make_vendor_repo(built_release, tmp_path / "vendor",
                               lambda tree: shutil.rmtree(tree / "usr/etc/selinux"))
    build = copy_build(built_release, tmp_path / "build")
    release = _release_with_base(tmp_path, f"{{repo: {str(repo)!r}, ref: {VENDOR_REF}}}")
    assert _compose(build, release, "microshift-minimal") == 0
    warnings = [line.strip() for line in capsys.readouterr().err.splitlines()
                if "WARNING" in line]
    assert len(warnings) == 1
    assert "the base has no SELinux policy (no /etc/selinux/config)" in warnings[0]
    assert "SELinux modules not installed: microshift" in warnings[0]
    published = build / "ostree" / "repo"
    commit = head(published, ostree(f"--repo={published}", "refs").stdout.split()[0])
    assert commit
    assert _metadata(published, commit, "microshift.selinux") == "unlabelled"
    assert _metadata(published, commit, "microshift.selinux-warning") == \
        warnings[0].removeprefix("WARNING: ")
    assert {item.label for item in commit_labels(published, commit).values()} == {None}


def test_a_module_that_does_not_load_into_the_base_policy_is_an_error(
        built_release: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A base whose policy lacks container-selinux's module: microshift's file contexts name
    # types (kubelet_exec_t, container_var_lib_t) that the policy then does not have.
    def drop_container_module(tree: Path) -> None:
        shutil.rmtree(tree / "usr/etc/selinux/targeted/active/modules/200/container")

    repo, _ = make_vendor_repo(built_release, tmp_path / "vendor", drop_container_module)
    build = copy_build(built_release, tmp_path / "build")
    release = _release_with_base(tmp_path, f"{{repo: {str(repo)!r}, ref: {VENDOR_REF}}}")
    assert _compose(build, release, "microshift-minimal") == 1
    err = capsys.readouterr().err
    assert "SELinux module microshift does not load into the base's policy targeted" in err
    assert "Traceback" not in err
    assert ostree(f"--repo={build / 'ostree' / 'repo'}", "refs").stdout.split() == []
