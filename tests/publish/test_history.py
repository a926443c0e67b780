"""`pull-published`: a CI job's fresh build directory continues the published history."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support import requires
from tests.support.keys import make_release_key
from tests.support.ostree import ComposedPair, cli, head, ostree, serve


def integration(test: Any) -> Any:
    marked = requires.root_only("compose runs rpm --root and keeps ownership")(test)
    return pytest.mark.integration(marked)


def sample_key(pair: ComposedPair) -> str:
    listing = subprocess.run(["gpg", "--homedir", str(pair.build_dir / "gpg"), "--with-colons",
                              "--list-secret-keys"], capture_output=True, text=True,
                             check=True).stdout
    return next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))


@integration
def test_pull_published_mirrors_the_verified_history(composed_pair: ComposedPair,
                                                     tmp_path: Path) -> None:
    pair, build = composed_pair, tmp_path / "build"
    gpg = tmp_path / "gpg"
    subprocess.run(["cp", "-a", str(pair.build_dir / "gpg"), str(gpg)], check=True)
    with serve(pair.repo) as (url, _):
        assert cli("--release", pair.release2, "pull-published", "--build-dir", build,
                   "--url", url, "--ref", pair.ref, "--depth", "2", "--gpg-homedir", gpg,
                   "--gpg-key", sample_key(pair)) == 0
    repo = build / "ostree" / "repo"
    assert head(repo, pair.ref) == pair.commit2  # the next compose's parent
    assert ostree(f"--repo={repo}", "show", pair.commit1).returncode == 0  # deltas start here
    assert ostree(f"--repo={repo}", "remote", "list").stdout.strip() == ""
    ostree(f"--repo={repo}", "fsck")


@integration
def test_pull_published_refuses_commits_another_key_signed(
        composed_pair: ComposedPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    homedir = tmp_path / "gnupg"
    fingerprint = make_release_key(homedir)
    with serve(composed_pair.repo) as (url, _):
        assert cli("pull-published", "--build-dir", tmp_path / "build", "--url", url,
                   "--ref", composed_pair.ref, "--gpg-homedir", homedir,
                   "--gpg-key", fingerprint) == 1
    err = capsys.readouterr().err
    assert f"do not verify with the release key {fingerprint}" in err and "Traceback" not in err
    assert head(tmp_path / "build" / "ostree" / "repo", composed_pair.ref) is None


@integration
def test_pull_published_of_a_first_release_starts_a_new_history(
        composed_pair: ComposedPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with serve(composed_pair.repo) as (url, _):
        assert cli("pull-published", "--build-dir", tmp_path / "build", "--url", url,
                   "--ref", "microshift/x86_64/not-yet") == 0
    err = capsys.readouterr().err
    assert "has no microshift/x86_64/not-yet yet" in err
    assert "NOT verified" in err


def test_pull_published_needs_a_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("pull-published", "--build-dir", tmp_path, "--url", "/srv/repo",
               "--ref", "r") == 2
    assert "--url: '/srv/repo' is not an http(s):// or file:// URL" in capsys.readouterr().err
