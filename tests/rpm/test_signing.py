"""Signing RPMs and repository metadata (real gpg and rpmsign)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.context import Context
from builder.core.progress import Progress
from builder.core.signing import SigningKey, ensure_sample_key, stop_agent
from builder.rpm.signing import sign_repo, sign_rpms
from tests.support.cli import RELEASE

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def signing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Context, SigningKey]]:
    build = tmp_path_factory.mktemp("signing")
    ctx = Context(build_dir=build, release_path=RELEASE, progress=Progress())
    key = ensure_sample_key(ctx.runner, ctx.progress, ctx.path("gpg"),
                            ctx.release.source_date_epoch)
    yield ctx, key
    stop_agent(ctx.runner, key.homedir)


def test_signed_rpms_verify_and_signing_is_reproducible(
        signing: tuple[Context, SigningKey], built_release: Path, tmp_path: Path) -> None:
    ctx, key = signing
    original = built_release / "rpms" / "microshift-core-4.14.2-1.x86_64.rpm"
    before = original.read_bytes()
    copies = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        copy = tmp_path / name / original.name
        shutil.copyfile(original, copy)
        copies.append(copy)
    linked = tmp_path / "linked.rpm"
    linked.hardlink_to(copies[0])  # as DIR/rpms links into the step cache
    sign_rpms(ctx, copies[:1], key)
    sign_rpms(ctx, copies[1:], key)
    assert copies[0].read_bytes() == copies[1].read_bytes() != before
    assert linked.read_bytes() == before  # the cached, unsigned file is untouched
    db = tmp_path / "rpmdb"
    db.mkdir()
    subprocess.run(["rpm", "--dbpath", str(db), "--import",
                    str(ctx.path("gpg", "SAMPLE-signing-key.asc"))], check=True)
    checked = subprocess.run(["rpm", "--dbpath", str(db), "-K", str(copies[0])],
                             capture_output=True, text=True, check=True).stdout
    assert "signatures OK" in checked


def test_repo_metadata_signature_verifies(signing: tuple[Context, SigningKey],
                                          built_release: Path, tmp_path: Path) -> None:
    ctx, key = signing
    repo = tmp_path / "repo"
    shutil.copytree(built_release / "repo" / "repodata", repo / "repodata")
    signature = sign_repo(ctx, repo, key)
    assert signature == repo / "repodata" / "repomd.xml.asc"
    verified = subprocess.run(["gpg", "--homedir", str(key.homedir), "--verify", str(signature),
                               str(repo / "repodata" / "repomd.xml")],
                              capture_output=True, text=True, check=False)
    assert verified.returncode == 0, verified.stderr
    assert "Good signature" in verified.stderr
