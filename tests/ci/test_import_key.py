"""`ci import-key`: the release key from a CI secret into a private GnuPG home, never shown."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

from builder.core.signing import gnupg_home
from tests.support.cli import run_cli
from tests.support.keys import make_release_key


@pytest.fixture(scope="module")
def secret(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    homedir = tmp_path_factory.mktemp("key") / "gnupg"
    fingerprint = make_release_key(homedir)
    armored = subprocess.run(["gpg", "--homedir", str(homedir), "--armor",
                              "--export-secret-keys", fingerprint], check=True,
                             capture_output=True, text=True).stdout
    subprocess.run(["gpgconf", "--homedir", str(homedir), "--kill", "gpg-agent"], check=False)
    return fingerprint, armored


def env_file(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def secret_keys(homedir: str) -> str:
    homedir = str(gnupg_home(Path(homedir)))  # a deep tmp_path is too long for its sockets
    listing = subprocess.run(["gpg", "--homedir", homedir, "--with-colons",
                              "--list-secret-keys"], check=True, capture_output=True,
                             text=True).stdout
    subprocess.run(["gpgconf", "--homedir", homedir, "--kill", "gpg-agent"], check=False)
    return listing


@pytest.mark.parametrize("as_file", [False, True], ids=["value", "gitlab-file-variable"])
def test_key_from_the_environment_lands_in_a_private_home(
        secret: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], as_file: bool) -> None:
    fingerprint, armored = secret
    value = armored
    if as_file:
        (tmp_path / "key.asc").write_text(armored)
        value = str(tmp_path / "key.asc")
    monkeypatch.setenv("RELEASE_SIGNING_KEY", value)
    monkeypatch.setenv("RUNNER_TEMP", str(tmp_path))
    out = tmp_path / "github.env"
    assert run_cli("ci", "import-key", "--env-file", out) == 0
    written = env_file(out)
    assert written["RELEASE_KEY_ID"] == fingerprint
    home = Path(written["RELEASE_GNUPGHOME"])
    assert home.parent == tmp_path and stat.S_IMODE(home.stat().st_mode) == 0o700
    assert f"fpr:::::::::{fingerprint}:" in secret_keys(str(home))
    shown = capsys.readouterr()
    assert "PRIVATE KEY" not in shown.out + shown.err
    assert not any(line in shown.out + shown.err for line in armored.splitlines()[3:-2])


def test_no_secret_writes_nothing_unless_required(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RELEASE_SIGNING_KEY", "")
    out = tmp_path / "github.env"
    assert run_cli("ci", "import-key", "--env-file", out) == 0
    assert not out.exists()
    assert "no release key" in capsys.readouterr().err
    assert run_cli("ci", "import-key", "--required", "--env-file", out) == 2
    assert "$RELEASE_SIGNING_KEY: is empty" in capsys.readouterr().err


def test_garbage_is_refused_without_being_echoed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    garbage = ("-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nbm90IGEga2V5IGJ1dCBzZWNyZXQtbG9va2l"
               "uZw==\n-----END PGP PRIVATE KEY BLOCK-----\n")
    monkeypatch.setenv("RELEASE_SIGNING_KEY", garbage)
    out = tmp_path / "github.env"
    assert run_cli("ci", "import-key", "--env-file", out, "--homedir", tmp_path / "h") == 1
    err = capsys.readouterr().err
    assert "could not be imported" in err and "bm90IGEga2V5" not in err
    assert not out.exists()
