"""Signing RPMs and repository metadata with the release key (real gpg and rpmsign)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.context import Context
from builder.errors import InputError
from builder.progress import Progress
from builder.signing import (
    SigningKey,
    ensure_sample_key,
    resolve_key,
    sign_repo,
    sign_rpms,
    stop_agent,
)

RELEASE = Path(__file__).resolve().parent.parent / "release.yaml"

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def signing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Context, SigningKey]]:
    build = tmp_path_factory.mktemp("signing")
    ctx = Context(build_dir=build, release_path=RELEASE, progress=Progress())
    key = ensure_sample_key(ctx)
    yield ctx, key
    stop_agent(ctx.runner, key.homedir)


def test_sample_key_is_made_once_and_its_public_half_exported(
        signing: tuple[Context, SigningKey]) -> None:
    ctx, key = signing
    assert ensure_sample_key(ctx) == key
    public = ctx.path("gpg", "SAMPLE-signing-key.asc").read_text()
    assert public.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")


def test_unknown_key_is_an_input_error(signing: tuple[Context, SigningKey]) -> None:
    ctx, key = signing
    with pytest.raises(InputError, match=r"--gpg-key: no secret key 'nobody@example\.invalid'"):
        resolve_key(ctx.runner, key.homedir, "nobody@example.invalid")


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
