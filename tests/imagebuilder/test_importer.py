"""Publishing a service-built commit: integrity checks first, then a re-commit of its tree."""

from __future__ import annotations

import fcntl
import io
import json
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from builder.core.errors import BuildError
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.imagebuilder.client import WeldrClient
from builder.imagebuilder.importer import Publish, import_commit_tarball, metadata_keys
from builder.imagebuilder.request import ComposeOptions
from tests.imagebuilder.conftest import BLUEPRINT, IMAGE, REF, VERSION
from tests.imagebuilder.fake_weldr import FakeWeldr

PUBLISH = Publish(image=IMAGE, blueprint_version=VERSION, version=VERSION,
                  timestamp=1700000000, compose="0b6d1f0e-1c2d-4e5f-8a9b-0c1d2e3f4a5b")


def service_tarball(client: WeldrClient, fake: FakeWeldr, dest: Path) -> Path:
    client.push_blueprint(BLUEPRINT)
    request = ComposeOptions("commit", REF).request(IMAGE, "edge-commit", parent=None, url=None)
    uuid = client.start_compose(request).uuid
    fake.scenario.states = ("FINISHED",)
    client.status(uuid)
    client.download_image(uuid, dest, Progress(stream=io.StringIO()))
    return dest


def refs(repo: Path) -> str:
    return subprocess.run(["ostree", f"--repo={repo}", "refs"], check=True, capture_output=True,
                          text=True).stdout.strip()


def test_metadata_keys_are_the_top_level_keys_of_the_commit_dict() -> None:
    raw = ("commit 1de9\n({'version': <'9.6'>, 'rpmostree.rpmdb.pkglist': <[('bash', '0', "
           "'5.1', '1', 'x86_64')]>, 'odd': <{'nested': <'x'>}>, 'q': <'it\\'s, {<'>}, "
           "@ay [], @a(say) [], '', '', uint64 1)")
    assert metadata_keys(raw) == ["version", "rpmostree.rpmdb.pkglist", "odd", "q"]
    assert metadata_keys("no commit here") == []


@pytest.mark.integration
def test_tampered_commit_tarball_leaves_the_local_repo_alone(
        client: WeldrClient, fake: FakeWeldr, tmp_path: Path) -> None:
    good = service_tarball(client, fake, tmp_path / "good.tar")
    bad = tmp_path / "bad.tar"
    with tarfile.open(good) as src, tarfile.open(bad, "w") as dst:
        for member in src.getmembers():
            data = src.extractfile(member) if member.isfile() else None
            if member.name == "./compose.json":
                meta = json.loads(data.read()) if data else {}
                meta["ostree-commit"] = "f" * 64
                raw = json.dumps(meta).encode()
                member.size = len(raw)
                data = io.BytesIO(raw)
            dst.addfile(member, data)
    repo = tmp_path / "ostree" / "repo"
    with pytest.raises(BuildError, match=r"but compose.json says f{64}"):
        import_commit_tarball(bad, repo, Runner(), Progress(stream=io.StringIO()), PUBLISH,
                              expected_ref=REF)
    assert refs(repo) == ""
    with pytest.raises(BuildError, match=r"compose\.json names ref 'microshift/x86_64/"):
        import_commit_tarball(good, repo, Runner(), Progress(stream=io.StringIO()), PUBLISH,
                              expected_ref="other/ref")
    assert refs(repo) == ""


@pytest.mark.integration
def test_importing_the_same_compose_again_changes_nothing(
        client: WeldrClient, fake: FakeWeldr, tmp_path: Path) -> None:
    tarball = service_tarball(client, fake, tmp_path / "commit.tar")
    repo = tmp_path / "ostree" / "repo"
    out = io.StringIO()
    first = import_commit_tarball(tarball, repo, Runner(), Progress(stream=out), PUBLISH)
    again = import_commit_tarball(tarball, repo, Runner(), Progress(stream=out), PUBLISH)
    assert first.changed and not again.changed
    assert again.commit == first.commit
    assert refs(repo) == REF
    assert "already holds this content as 4.14.2-1; unchanged" in out.getvalue()
    # The service's commit itself is not kept: only the release's commit is published.
    objects = {p.stem for p in (repo / "objects").rglob("*.commit")}
    assert {o for o in objects if len(o) == 62} == {first.commit[2:]}


@pytest.mark.integration
def test_an_import_is_refused_while_a_compose_holds_the_repo(
        client: WeldrClient, fake: FakeWeldr, tmp_path: Path) -> None:
    tarball = service_tarball(client, fake, tmp_path / "commit.tar")
    repo = tmp_path / "ostree" / "repo"
    repo.mkdir(parents=True)
    with (repo.parent / ".lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(BuildError, match="another compose or import is writing"):
            import_commit_tarball(tarball, repo, Runner(), Progress(stream=io.StringIO()),
                                  PUBLISH)
    assert refs(repo) == ""


@pytest.mark.integration
@pytest.mark.fuzz
def test_truncated_or_damaged_tarballs_are_refused_and_the_repo_untouched(
        client: WeldrClient, fake: FakeWeldr, tmp_path: Path) -> None:
    """A download cut short or damaged on the way (the service's image, a proxy, a disk):
    the import fails with one BuildError and publishes nothing, whatever the damage."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    good = service_tarball(client, fake, tmp_path / "good.tar").read_bytes()
    repo = tmp_path / "ostree" / "repo"
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    @settings(max_examples=min(settings().max_examples, 200))  # each runs ostree
    @given(cut=st.integers(1, len(good) - 1), flip=st.booleans())
    def check(cut: int, flip: bool) -> None:
        bad = scratch / "bad.tar"
        if flip:  # one byte of a file's content (past its 512-byte tar header) changed
            at = min(len(good) - 1, 512 + cut % (len(good) - 512))
            bad.write_bytes(good[:at] + bytes([good[at] ^ 0xFF]) + good[at + 1:])
        else:
            bad.write_bytes(good[:cut])
        try:
            import_commit_tarball(bad, repo, Runner(), Progress(stream=io.StringIO()), PUBLISH,
                                  expected_ref=REF)
        except BuildError as exc:
            assert str(exc).strip()
            assert refs(repo) == ""
            return
        # Accepted: only when the damage fell where nothing is read (tar padding).
        assert refs(repo) == REF
        subprocess.run(["ostree", f"--repo={repo}", "fsck"], check=True, capture_output=True)
        subprocess.run(["ostree", f"--repo={repo}", "refs", "--delete", REF], check=True)

    check()


def hostile_tarball(path: Path, member: tarfile.TarInfo, data: bytes = b"") -> Path:
    with tarfile.open(path, "w") as tar:
        ok = tarfile.TarInfo("repo/config")
        ok.size = 4
        tar.addfile(ok, io.BytesIO(b"ok\n\n"))
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.mark.parametrize(("member", "problem"), [
    (_member("../escaped"), "member '../escaped' is outside the destination"),
    (_member("/etc/escaped"), "member '/etc/escaped' is outside the destination"),
    (_member("repo/dev", tarfile.CHRTYPE), "member 'repo/dev' is a special file"),
    (_member("repo/fifo", tarfile.FIFOTYPE), "member 'repo/fifo' is a special file"),
    (_member("repo/up", tarfile.SYMTYPE, "../../etc/shadow"),
     "member 'repo/up' links outside the destination ('../../etc/shadow')"),
    (_member("repo/abs", tarfile.SYMTYPE, "/etc/shadow"),
     "member 'repo/abs' links outside the destination ('/etc/shadow')"),
    (_member("repo/hard", tarfile.LNKTYPE, "../outside"),
     "member 'repo/hard' links outside the destination ('../outside')"),
])
def test_a_hostile_tarball_is_refused_by_the_pre_3_11_4_checks_too(
        tmp_path: Path, member: tarfile.TarInfo, problem: str) -> None:
    """Debian 12's Python 3.11.2 has no extraction filters; the checks that stand in for the
    "data" filter refuse what it refuses, and extract nothing."""
    from builder.imagebuilder.importer import _data_members

    tarball = hostile_tarball(tmp_path / "hostile.tar", member)
    dest = tmp_path / "dest"
    dest.mkdir()
    with tarfile.open(tarball) as tar, pytest.raises(tarfile.TarError, match=re.escape(problem)):
        _data_members(tar, dest)
    assert not list(dest.iterdir())


def test_the_pre_3_11_4_checks_pass_an_ordinary_tree_and_drop_setuid(tmp_path: Path) -> None:
    from builder.imagebuilder.importer import _data_members

    member = _member("repo/objects/ab/cd.file")
    member.mode = 0o4777
    tarball = hostile_tarball(tmp_path / "fine.tar", member, b"data")
    with tarfile.open(tarball) as tar:
        members = _data_members(tar, tmp_path / "dest")
        assert [m.name for m in members] == ["repo/config", "repo/objects/ab/cd.file"]
        assert members[1].mode == 0o755
