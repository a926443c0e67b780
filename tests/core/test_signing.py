"""Signing keys: the SAMPLE throwaway key and a release key named by id (real gpg)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.core.children import gpg_agents
from builder.core.errors import BuildError, InputError
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.core.signing import (
    SAMPLE_PUBLIC_KEY,
    SAMPLE_UID,
    SOCKET_PATH_MAX,
    SigningKey,
    ensure_sample_key,
    export_public_key,
    gnupg_home,
    gpg_time,
    import_secret_key,
    key_info,
    release_signing_key,
    resolve_key,
    sign_detached,
    signature_epoch,
    stop_agent,
)
from tests.support.keys import make_release_key

pytestmark = pytest.mark.integration
EPOCH = 1700000000


@pytest.fixture(scope="module")
def sample_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SigningKey]:
    home = tmp_path_factory.mktemp("signing") / "gpg"
    key = ensure_sample_key(Runner(), Progress(), home, EPOCH)
    yield key
    stop_agent(Runner(), key.homedir)


def test_sample_key_is_made_once_and_its_public_half_exported(sample_key: SigningKey) -> None:
    assert ensure_sample_key(Runner(), Progress(), sample_key.homedir, EPOCH) == sample_key
    public = (sample_key.homedir / SAMPLE_PUBLIC_KEY).read_text()
    assert public.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")


def test_unknown_key_is_an_input_error(sample_key: SigningKey) -> None:
    with pytest.raises(InputError, match=r"--gpg-key: no secret key 'nobody@example\.invalid'"):
        resolve_key(Runner(), sample_key.homedir, "nobody@example.invalid")


def gpg_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["gpg", "--homedir", str(home), "--batch", *args],
                          capture_output=True, text=True, check=False)


def test_the_sample_key_is_dated_at_the_epoch_and_exported_whole(sample_key: SigningKey,
                                                                   tmp_path: Path) -> None:
    assert key_info(Runner(), sample_key.homedir, SAMPLE_UID) == (sample_key.key_id, EPOCH)
    assert gpg_time(EPOCH) == "20231114T221320"
    assert sample_key.ostree_flags() == [f"--gpg-sign={sample_key.key_id}",
                                         f"--gpg-homedir={sample_key.homedir}"]
    assert not list(sample_key.homedir.parent.glob(".gpg-*"))  # no half-made homes left
    # What devices import: that key's public half, nothing else.
    home = tmp_path / "device"
    home.mkdir(mode=0o700)
    gpg_cli(home, "--import", str(sample_key.homedir / SAMPLE_PUBLIC_KEY))
    listed = gpg_cli(home, "--with-colons", "--list-keys").stdout
    assert [line.split(":")[9] for line in listed.splitlines() if line.startswith("fpr:")] == \
        [sample_key.key_id]
    assert gpg_cli(home, "--with-colons", "--list-secret-keys").stdout == ""


def test_a_home_without_the_sample_key_gets_a_new_one(tmp_path: Path) -> None:
    home = tmp_path / "gpg"
    home.mkdir(mode=0o700)
    (home / "pubring.kbx").write_bytes(b"")  # a keyring, but not the key
    stream = io.StringIO()
    key = ensure_sample_key(Runner(), Progress(stream=stream), home, EPOCH)
    try:
        assert key_info(Runner(), home, SAMPLE_UID) == (key.key_id, EPOCH)
        assert f"created the SAMPLE signing key {key.key_id} in {home} (throwaway, no " \
               "passphrase; use --gpg-homedir/--gpg-key for a real release)" in stream.getvalue()
        assert (home / SAMPLE_PUBLIC_KEY).is_file() and not list(tmp_path.glob(".gpg-*"))
    finally:
        stop_agent(Runner(), home)


def test_which_key_signs(sample_key: SigningKey, tmp_path: Path) -> None:
    runner, stream = Runner(), io.StringIO()
    progress = Progress(stream=stream)
    for home, key_id in ((sample_key.homedir, None), (None, sample_key.key_id)):
        with pytest.raises(InputError) as caught:
            release_signing_key(runner, progress, home, key_id, sample_home=None, epoch=EPOCH)
        assert str(caught.value) == "command line: --gpg-homedir/--gpg-key: give both or neither"
    given = release_signing_key(runner, progress, sample_key.homedir, SAMPLE_UID,
                                sample_home=tmp_path / "unused", epoch=EPOCH)
    assert given == SigningKey(sample_key.key_id, sample_key.homedir.resolve())
    assert release_signing_key(runner, progress, None, None, sample_home=sample_key.homedir,
                               epoch=EPOCH) == sample_key
    assert not (tmp_path / "unused").exists()
    assert release_signing_key(runner, progress, None, None, sample_home=None,
                               epoch=EPOCH) is None
    assert stream.getvalue().splitlines()[-1] == \
        "    no signing key given (--gpg-homedir/--gpg-key): NOT signing"


def test_a_detached_signature_is_pinned_to_its_epoch_and_verifies(sample_key: SigningKey,
                                                                   tmp_path: Path) -> None:
    data = tmp_path / "index.json"
    data.write_text('{"a": 1}\n')
    signature = sign_detached(Runner(), sample_key, data, epoch=EPOCH + 5)
    assert signature == tmp_path / "index.json.sig"
    first = signature.read_bytes()
    assert sign_detached(Runner(), sample_key, data, epoch=EPOCH + 5).read_bytes() == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.json", "index.json.sig"]
    verified = gpg_cli(sample_key.homedir, "--status-fd", "1", "--verify", str(signature),
                       str(data))
    valid = [line.split() for line in verified.stdout.splitlines() if "VALIDSIG" in line]
    assert verified.returncode == 0 and valid[0][2] == sample_key.key_id
    assert valid[0][4] == str(EPOCH + 5)  # the signature's creation time
    data.write_text('{"a": 2}\n')
    assert gpg_cli(sample_key.homedir, "--verify", str(signature), str(data)).returncode == 1


def test_the_signature_time_is_never_before_the_key(sample_key: SigningKey) -> None:
    assert signature_epoch(Runner(), sample_key, EPOCH - 100) == EPOCH
    assert signature_epoch(Runner(), sample_key, EPOCH + 100) == EPOCH + 100


def test_an_unknown_key_names_the_home_and_how_to_list_keys(sample_key: SigningKey) -> None:
    with pytest.raises(InputError) as caught:
        key_info(Runner(), sample_key.homedir, "nobody@example.invalid")
    assert str(caught.value) == (
        f"command line: --gpg-key: no secret key 'nobody@example.invalid' in GnuPG home "
        f"{sample_key.homedir} (hint: list keys with `gpg --homedir DIR --list-secret-keys`)")


def test_the_agent_of_a_home_is_stopped(sample_key: SigningKey, tmp_path: Path) -> None:
    data = tmp_path / "x"
    data.write_text("x")
    sign_detached(Runner(), sample_key, data)  # signing starts the home's agent
    assert [a for a in gpg_agents() if a.homedir == sample_key.homedir]
    stop_agent(Runner(), sample_key.homedir)
    deadline = time.monotonic() + 10
    while [a for a in gpg_agents() if a.homedir == sample_key.homedir]:
        assert time.monotonic() < deadline, "gpg-agent still runs"
        time.sleep(0.05)


def test_importing_the_release_key(sample_key: SigningKey, tmp_path: Path) -> None:
    secret = gpg_cli(sample_key.homedir, "--pinentry-mode", "loopback", "--passphrase", "",
                     "--armor", "--export-secret-keys", sample_key.key_id).stdout.encode()
    home = tmp_path / "ci" / "home"  # neither exists yet
    assert import_secret_key(Runner(), home, secret) == sample_key.key_id
    assert home.stat().st_mode & 0o777 == 0o700
    with pytest.raises(BuildError) as caught:
        import_secret_key(Runner(), tmp_path / "garbage", b"-----BEGIN nothing-----\n")
    assert str(caught.value) == (
        "the release signing key could not be imported (gpg's output is not shown, so no key "
        "material reaches the log) (hint: store an ASCII-armored secret key without passphrase "
        "(gpg --armor --export-secret-keys KEYID) in the secret)")
    other = tmp_path / "other"
    make_release_key(other)
    both = secret + gpg_cli(other, "--pinentry-mode", "loopback", "--passphrase", "",
                            "--armor", "--export-secret-keys").stdout.encode()
    with pytest.raises(BuildError, match=r"^the secret holds 2 secret keys; give exactly one$"):
        import_secret_key(Runner(), tmp_path / "two", both)
    public = gpg_cli(other, "--armor", "--export").stdout.encode()
    with pytest.raises(BuildError, match=r"^the release signing key could not be imported"):
        import_secret_key(Runner(), tmp_path / "public", public)  # imports, but no secret key
    for name in ("ci/home", "other", "two", "garbage", "public"):
        stop_agent(Runner(), tmp_path / name)


def test_a_home_too_deep_for_gpg_agents_sockets_still_signs(tmp_path: Path) -> None:
    """A unix socket path holds at most 107 bytes; a deep build directory's DIR/gpg is
    handed to gpg (and ostree, rpmsign, gpgconf) through a short symlink."""
    home = tmp_path / ("deep-" * 20) / "build" / "gpg"
    assert len(str(home)) > SOCKET_PATH_MAX
    key = ensure_sample_key(Runner(), Progress(stream=io.StringIO()), home, EPOCH)
    try:
        alias = gnupg_home(home)
        assert alias.is_symlink() and alias.resolve() == home.resolve()
        assert len(str(alias)) <= SOCKET_PATH_MAX and gnupg_home(home) == alias  # stable
        data = tmp_path / "data"
        data.write_text("x")
        signature = sign_detached(Runner(), key, data, epoch=EPOCH)
        assert gpg_cli(home, "--verify", str(signature), str(data)).returncode == 0
        assert [a for a in gpg_agents() if a.homedir == alias]  # the agent runs there ...
        stop_agent(Runner(), home)
        deadline = time.monotonic() + 10
        while [a for a in gpg_agents() if a.homedir == alias]:  # ... and stops
            assert time.monotonic() < deadline, "gpg-agent still runs"
            time.sleep(0.05)
    finally:
        stop_agent(Runner(), home)
    assert gnupg_home(tmp_path / "gpg") == tmp_path / "gpg"  # short homes are used as they are


def test_where_the_socket_limit_falls() -> None:
    # Under the temporary directory, not tmp_path: a deep pytest base would pass the limit.
    base = os.path.join(tempfile.gettempdir(), f"h{os.getpid()}-")
    exact = Path(base + "x" * (SOCKET_PATH_MAX - len(base)))
    assert len(str(exact)) == SOCKET_PATH_MAX and gnupg_home(exact) == exact
    longer, other = Path(f"{exact}y"), Path(f"{exact}z")
    aliases = gnupg_home(longer), gnupg_home(other)
    try:
        assert aliases[0] != aliases[1]  # each deep home has an alias of its own
        assert [os.readlink(alias) for alias in aliases] == [str(longer), str(other)]
    finally:
        for alias in aliases:
            alias.unlink()


def test_a_stale_alias_is_pointed_back_at_its_home(tmp_path: Path) -> None:
    home = tmp_path / ("deep-" * 20) / "gpg"
    alias = gnupg_home(home)
    alias.unlink()
    alias.symlink_to(tmp_path / "elsewhere")
    assert gnupg_home(home) == alias and os.readlink(alias) == str(home)


def test_the_primary_key_is_named_when_the_key_has_subkeys(tmp_path: Path) -> None:
    home = tmp_path / "gpg"
    primary = make_release_key(home)
    try:
        added = gpg_cli(home, "--pinentry-mode", "loopback", "--passphrase", "",
                        "--quick-add-key", primary, "cv25519", "encr", "never")
        assert added.returncode == 0, added.stderr
        listing = gpg_cli(home, "--with-colons", "--list-secret-keys").stdout
        assert len([line for line in listing.splitlines() if line.startswith("fpr:")]) == 2
        assert key_info(Runner(), home, primary)[0] == primary
    finally:
        stop_agent(Runner(), home)


def test_the_sample_key_never_expires_and_only_its_public_half_is_exported(
        sample_key: SigningKey, tmp_path: Path) -> None:
    listing = gpg_cli(sample_key.homedir, "--with-colons", "--list-keys", SAMPLE_UID).stdout
    pub = next(line.split(":") for line in listing.splitlines() if line.startswith("pub:"))
    assert pub[6] == ""  # no expiry: a device must not stop updating when a key ages
    home = tmp_path / "two-keys"
    other = make_release_key(home)
    try:
        gpg_cli(home, "--import", str(sample_key.homedir / SAMPLE_PUBLIC_KEY))
        export_public_key(Runner(), SigningKey(other, home), tmp_path / "other.asc")
        device = tmp_path / "device"
        device.mkdir(mode=0o700)
        gpg_cli(device, "--import", str(tmp_path / "other.asc"))
        listed = gpg_cli(device, "--with-colons", "--list-keys").stdout
        assert [line.split(":")[9] for line in listed.splitlines()
                if line.startswith("fpr:")] == [other]
    finally:
        stop_agent(Runner(), home)


def test_a_sample_release_gets_a_new_sample_key_dated_at_its_epoch(tmp_path: Path) -> None:
    stream = io.StringIO()
    home = tmp_path / "build" / "gpg"
    key = release_signing_key(Runner(), Progress(stream=stream), None, None,
                              sample_home=home, epoch=EPOCH + 7)
    try:
        assert key is not None and key_info(Runner(), home, SAMPLE_UID) == (key.key_id, EPOCH + 7)
        assert f"created the SAMPLE signing key {key.key_id}" in stream.getvalue()
    finally:
        stop_agent(Runner(), home)


def flaky_agent_home(sample_key: SigningKey, tmp_path: Path, failures: int) -> Path:
    """A copy of the SAMPLE key's home whose gpg-agent fails to start `failures` times."""
    home = tmp_path / "gpg"
    shutil.copytree(sample_key.homedir, home, ignore=shutil.ignore_patterns("S.*"))
    agent = tmp_path / "agent"
    agent.write_text(f"""#!/bin/sh
count=$(cat {tmp_path}/starts 2>/dev/null || echo 0)
echo $((count + 1)) > {tmp_path}/starts
[ "$count" -ge {failures} ] || exit 1
exec gpg-agent "$@"
""")
    agent.chmod(0o755)
    (home / "gpg.conf").write_text(f"agent-program {agent}\n")
    return home


def test_an_agent_that_does_not_come_up_at_first_is_tried_again(sample_key: SigningKey,
                                                                 tmp_path: Path) -> None:
    home = flaky_agent_home(sample_key, tmp_path, failures=2)
    try:
        assert key_info(Runner(), home, SAMPLE_UID) == (sample_key.key_id, EPOCH)
        assert (tmp_path / "starts").read_text().strip() == "3"
    finally:
        stop_agent(Runner(), home)


def test_gpgs_own_trouble_is_said_as_gpg_said_it(sample_key: SigningKey,
                                                  tmp_path: Path) -> None:
    home = flaky_agent_home(sample_key, tmp_path, failures=99)
    with pytest.raises(BuildError) as caught:
        key_info(Runner(), home, SAMPLE_UID)
    assert not isinstance(caught.value, InputError)  # the key is there; the agent is not
    assert str(caught.value) == (f"gpg could not list the keys in GnuPG home {home}: "
                                 "gpg: error reading key: No agent running")
    assert (tmp_path / "starts").read_text().strip() == "3"


def test_a_failed_key_generation_leaves_no_half_made_home(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "build" / "gpg"
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "gpg").write_text("#!/bin/sh\necho 'gpg: out of entropy' >&2\nexit 2\n")
    (tools / "gpg").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    with pytest.raises(BuildError, match="gpg: out of entropy"):
        ensure_sample_key(Runner(), Progress(stream=io.StringIO()), home, EPOCH)
    assert list((tmp_path / "build").iterdir()) == []  # neither the home nor its draft
