"""Signing RPMs and repository metadata (real gpg and rpmsign).

The packages signed here are a small one built for the purpose (rpmbuild, createrepo_c), not
the release's: these tests stay fast enough to run once per mutant (`nox -s mutation`)."""

from __future__ import annotations

import io
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.context import Context
from builder.core.children import gpg_agents
from builder.core.errors import BuildError, ToolError
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.core.signing import (
    SigningKey,
    ensure_sample_key,
    export_public_key,
    gnupg_home,
    stop_agent,
)
from builder.rpm.rpm_signing import sign_repo, sign_rpms
from builder.rpm.rpmbuild import build_spec, createrepo
from tests.support.cli import RELEASE
from tests.support.keys import make_release_key

pytestmark = pytest.mark.integration
SPEC = """Name: signed-sample
Version: 1.0
Release: 1
Summary: a package to sign
License: Apache-2.0
BuildArch: noarch

%description
A package to sign.

%install
mkdir -p %{buildroot}/usr/share/signed-sample
echo data > %{buildroot}/usr/share/signed-sample/data

%files
/usr/share/signed-sample/data
"""


@pytest.fixture(scope="module")
def unsigned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DIR/rpms/*.rpm (unsigned) and DIR/repo, a yum repository of them."""
    build = tmp_path_factory.mktemp("unsigned")
    spec = build / "signed-sample.spec"
    spec.write_text(SPEC)
    rpms = build_spec(Runner(), spec, build / "top", "noarch", 1700000000)
    (build / "rpms").mkdir()
    for rpm in rpms:
        rpm.rename(build / "rpms" / rpm.name)
    createrepo(Runner(), sorted((build / "rpms").glob("*.rpm")), build / "repo", 1700000000)
    return build


@pytest.fixture(scope="module")
def signing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Context, SigningKey]]:
    build = tmp_path_factory.mktemp("signing")
    ctx = Context(build_dir=build, release_path=RELEASE, progress=Progress())
    key = ensure_sample_key(ctx.runner, ctx.progress, ctx.layout.sample_gpg_home,
                            ctx.release.source_date_epoch)
    yield ctx, key
    stop_agent(ctx.runner, key.homedir)


def test_signed_rpms_verify_and_signing_is_reproducible(
        signing: tuple[Context, SigningKey], unsigned: Path, tmp_path: Path) -> None:
    ctx, key = signing
    original = unsigned / "rpms" / "signed-sample-1.0-1.noarch.rpm"
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
                    str(ctx.layout.sample_public_key)], check=True)
    checked = subprocess.run(["rpm", "--dbpath", str(db), "-K", str(copies[0])],
                             capture_output=True, text=True, check=True).stdout
    assert "signatures OK" in checked


def test_repo_metadata_signature_verifies(signing: tuple[Context, SigningKey],
                                          unsigned: Path, tmp_path: Path) -> None:
    ctx, key = signing
    repo = unsigned_repo_copy(unsigned, tmp_path)
    signature = sign_repo(ctx, repo, key)
    assert signature == repo / "repodata" / "repomd.xml.asc"
    verified = subprocess.run(["gpg", "--homedir", str(key.homedir), "--verify", str(signature),
                               str(repo / "repodata" / "repomd.xml")],
                              capture_output=True, text=True, check=False)
    assert verified.returncode == 0, verified.stderr
    assert "Good signature" in verified.stderr


# --- what a device's rpm and dnf refuse: the signatures bind the bytes and the key -------
@pytest.fixture(scope="module")
def other_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SigningKey]:
    """A key that is not the release's: what an attacker or a wrong CI secret signs with."""
    homedir = tmp_path_factory.mktemp("other") / "gpg"
    key = SigningKey(key_id=make_release_key(homedir), homedir=homedir)
    yield key
    stop_agent(Runner(), homedir)


def rpm_check(key: SigningKey, rpm: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`rpm -K` with only `key`'s public half imported, as on a device."""
    db = tmp_path / f"rpmdb-{key.key_id[-8:]}"
    db.mkdir(exist_ok=True)
    public = export_public_key(Runner(), key, tmp_path / f"{key.key_id}.asc")
    subprocess.run(["rpm", "--dbpath", str(db), "--import", str(public)], check=True)
    return subprocess.run(["rpm", "--dbpath", str(db), "-K", str(rpm)], capture_output=True,
                          text=True, check=False)


def unsigned_repo_copy(unsigned: Path, tmp_path: Path) -> Path:
    """A repository of its own (the metadata signing writes beside): TMP/repo."""
    repo = tmp_path / "repo"
    shutil.copytree(unsigned / "repo" / "repodata", repo / "repodata")
    return repo


def signed_copy(ctx: Context, key: SigningKey, unsigned: Path, dest: Path) -> Path:
    dest.mkdir()
    copy = dest / "signed-sample-1.0-1.noarch.rpm"
    shutil.copyfile(unsigned / "rpms" / copy.name, copy)
    sign_rpms(ctx, [copy], key)
    return copy


def test_a_tampered_signed_rpm_is_refused(signing: tuple[Context, SigningKey],
                                          unsigned: Path, tmp_path: Path) -> None:
    ctx, key = signing
    rpm = signed_copy(ctx, key, unsigned, tmp_path / "signed")
    assert rpm_check(key, rpm, tmp_path).returncode == 0
    data = bytearray(rpm.read_bytes())
    data[-100] ^= 0xFF  # a byte of the compressed payload
    rpm.write_bytes(bytes(data))
    checked = rpm_check(key, rpm, tmp_path)
    assert checked.returncode == 1
    assert checked.stdout.endswith(": DIGESTS SIGNATURES NOT OK\n"), checked.stdout


def test_an_rpm_signed_by_another_key_is_refused(signing: tuple[Context, SigningKey],
                                                 other_key: SigningKey, unsigned: Path,
                                                 tmp_path: Path) -> None:
    ctx, key = signing
    rpm = signed_copy(ctx, other_key, unsigned, tmp_path / "foreign")
    assert rpm_check(other_key, rpm, tmp_path).returncode == 0  # signed, just not by us
    checked = rpm_check(key, rpm, tmp_path)
    assert checked.returncode == 1
    assert checked.stdout.endswith(": digests SIGNATURES NOT OK\n"), checked.stdout


def gpg_verify(key: SigningKey, repo: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """dnf's repo_gpgcheck: repomd.xml.asc against only the release key's public half."""
    home = tmp_path / "verify-home"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(mode=0o700)
    public = export_public_key(Runner(), key, tmp_path / "release.asc")
    subprocess.run(["gpg", "--homedir", str(home), "--batch", "--import", str(public)],
                   check=True, capture_output=True)
    try:
        return subprocess.run(["gpg", "--homedir", str(home), "--batch", "--status-fd", "1",
                               "--verify", str(repo / "repodata/repomd.xml.asc"),
                               str(repo / "repodata/repomd.xml")],
                              capture_output=True, text=True, check=False)
    finally:
        stop_agent(Runner(), home)


def test_altered_repository_metadata_is_refused(signing: tuple[Context, SigningKey],
                                                unsigned: Path, tmp_path: Path) -> None:
    ctx, key = signing
    repo = unsigned_repo_copy(unsigned, tmp_path)
    sign_repo(ctx, repo, key)
    assert "[GNUPG:] VALIDSIG" in gpg_verify(key, repo, tmp_path).stdout
    repomd = repo / "repodata/repomd.xml"
    # The checksum of primary.xml is what an attacker swaps to serve other packages.
    text = repomd.read_text()
    digit = text.index("<checksum type=\"sha256\">") + len("<checksum type=\"sha256\">")
    repomd.write_text(text[:digit] + ("0" if text[digit] != "0" else "1") + text[digit + 1:])
    verified = gpg_verify(key, repo, tmp_path)
    assert verified.returncode == 1
    assert "[GNUPG:] BADSIG" in verified.stdout and "VALIDSIG" not in verified.stdout


def test_repository_metadata_signed_by_another_key_is_refused(
        signing: tuple[Context, SigningKey], other_key: SigningKey, unsigned: Path,
        tmp_path: Path) -> None:
    ctx, key = signing
    repo = unsigned_repo_copy(unsigned, tmp_path)
    sign_repo(ctx, repo, other_key)
    verified = gpg_verify(key, repo, tmp_path)
    assert verified.returncode == 2
    assert "[GNUPG:] NO_PUBKEY" in verified.stdout and "VALIDSIG" not in verified.stdout


def test_a_failed_signing_leaves_the_rpm_unsigned_and_no_copy_behind(
        signing: tuple[Context, SigningKey], unsigned: Path, tmp_path: Path) -> None:
    ctx, key = signing
    good = tmp_path / "signed-sample-1.0-1.noarch.rpm"
    shutil.copyfile(unsigned / "rpms" / good.name, good)
    bad = tmp_path / "truncated-1.0-1.noarch.rpm"
    bad.write_bytes(good.read_bytes()[:200])
    before = good.read_bytes()
    with pytest.raises(ToolError) as caught:
        sign_rpms(ctx, [bad, good], key)
    assert caught.value.argv[0] == "rpmsign" and caught.value.argv[-1].endswith(".signing")
    assert good.read_bytes() == before and bad.stat().st_size == 200
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([good.name, bad.name])


def test_signing_stops_its_agent(signing: tuple[Context, SigningKey], unsigned: Path,
                                 tmp_path: Path) -> None:
    ctx, key = signing
    for sign in (lambda: signed_copy(ctx, key, unsigned, tmp_path / "rpm"),
                 lambda: sign_repo(ctx, unsigned_repo_copy(unsigned, tmp_path), key)):
        sign()
        deadline = time.monotonic() + 10
        while [a for a in gpg_agents() if a.homedir == gnupg_home(key.homedir)]:
            assert time.monotonic() < deadline, "gpg-agent still runs after signing"
            time.sleep(0.05)


def test_what_cannot_be_signed_is_said(signing: tuple[Context, SigningKey], unsigned: Path,
                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx, key = signing
    with pytest.raises(BuildError) as caught:
        sign_repo(ctx, tmp_path, key)
    assert str(caught.value) == f"{tmp_path} is not a yum repository (no repodata/repomd.xml)"
    monkeypatch.setenv("PATH", str(tmp_path))  # no gpg on it
    with pytest.raises(BuildError) as caught:
        sign_rpms(ctx, [unsigned / "rpms" / "signed-sample-1.0-1.noarch.rpm"], key)
    assert str(caught.value) == "gpg is not installed; it is needed to sign RPMs"


def test_signatures_are_dated_at_the_release_epoch_and_armored(
        signing: tuple[Context, SigningKey], unsigned: Path, tmp_path: Path) -> None:
    """Pinned to source_date_epoch (the key is no younger): a rebuild tomorrow signs the
    same bytes; repomd.xml.asc is ASCII-armored, as dnf's repo_gpgcheck reads it."""
    ctx, key = signing
    epoch = ctx.release.source_date_epoch
    rpm = signed_copy(ctx, key, unsigned, tmp_path / "rpm")
    header = subprocess.run(["rpm", "-qp", "--qf", "%{RSAHEADER:pgpsig}", str(rpm)],
                            capture_output=True, text=True, check=True,
                            env={"PATH": "/usr/bin:/bin", "TZ": "UTC", "LC_ALL": "C"}).stdout
    assert time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(epoch)) in header, header
    signature = sign_repo(ctx, unsigned_repo_copy(unsigned, tmp_path), key)
    assert signature.read_text().startswith("-----BEGIN PGP SIGNATURE-----\n")
    verified = subprocess.run(["gpg", "--homedir", str(key.homedir), "--status-fd", "1",
                               "--verify", str(signature),
                               str(signature.with_name("repomd.xml"))],
                              capture_output=True, text=True, check=False)
    valid = [line.split() for line in verified.stdout.splitlines() if "VALIDSIG" in line]
    assert valid and valid[0][4] == str(epoch)


def test_signing_says_how_many_rpms_and_which_key(signing: tuple[Context, SigningKey],
                                                   unsigned: Path, tmp_path: Path) -> None:
    _, key = signing
    stream = io.StringIO()
    ctx = Context(build_dir=tmp_path, release_path=RELEASE, progress=Progress(stream=stream))
    signed_copy(ctx, key, unsigned, tmp_path / "rpm")
    assert stream.getvalue().splitlines()[0] == f"==> sign 1 RPMs with {key.key_id[-16:]}"
