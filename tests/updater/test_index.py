"""The signed update index, read in-process: the signature check with real gpg (the keys of
the device's remote only) and every refusal of the index's contents. The shipped program
runs the same code against a published repository in tests/device/test_update.py."""

from __future__ import annotations

import json
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from builder.core.children import gpg_agents
from builder.core.errors import BuildError
from builder.core.http_thread import ServedInThread
from builder.core.runner import Runner
from builder.updater.fetch import Patience
from builder.updater.index import (
    INDEX_FORMAT,
    MAX_METADATA,
    UpdateRefused,
    fetch_small,
    parse_index,
    verify_signature,
)
from tests.support.keys import make_release_key

pytestmark = pytest.mark.integration

REF = "microshift/x86_64/microshift-full"
OLD, NEW, SHA = "a" * 64, "b" * 64, "c" * 64
WHAT = "http://repo/updates/index.json"
FAST = Patience(timeout=5)


class Key:
    def __init__(self, homedir: Path) -> None:
        self.homedir = homedir
        self.fingerprint = make_release_key(homedir)
        self.public = homedir.parent / f"{homedir.name}.asc"
        self.public.write_bytes(self.gpg("--armor", "--export"))

    def gpg(self, *args: str, data: bytes | None = None) -> bytes:
        return subprocess.run(["gpg", "--homedir", str(self.homedir), "--batch", *args],
                              input=data, capture_output=True, check=True).stdout

    def sign(self, data: bytes) -> bytes:
        return self.gpg("--detach-sign", "--output", "-", data=data)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Key, Key]]:
    base = tmp_path_factory.mktemp("keys")
    made = Key(base / "release"), Key(base / "other")
    yield made
    for key in made:
        subprocess.run(["gpgconf", "--homedir", str(key.homedir), "--kill", "all"], check=False)


def test_a_good_signature_names_its_key(keys: tuple[Key, Key]) -> None:
    release, other = keys
    data = b'{"index": 1}\n'
    assert verify_signature(Runner(), data, release.sign(data), [release.public],
                            WHAT) == release.fingerprint
    # Any of the remote's keys will do.
    assert verify_signature(Runner(), data, release.sign(data), [other.public, release.public],
                            WHAT) == release.fingerprint


@pytest.mark.parametrize(("case", "reason"), [
    ("altered", "BADSIG"),
    ("other-key", "ERRSIG"),
    ("garbage", "no good signature"),
    ("empty", "no good signature"),
])
def test_a_signature_that_does_not_verify_is_refused(keys: tuple[Key, Key], case: str,
                                                     reason: str) -> None:
    release, other = keys
    data = b'{"index": 1}\n'
    signature = {"altered": release.sign(data), "other-key": other.sign(data),
                 "garbage": b"\x89PGP? no", "empty": b""}[case]
    signed = data + b" " if case == "altered" else data
    with pytest.raises(UpdateRefused) as caught:
        verify_signature(Runner(), signed, signature, [release.public], WHAT)
    assert str(caught.value).startswith(
        f"{WHAT}: signature does not verify with the remote's keys ({reason})")
    assert caught.value.hint == "the device keeps its commit; publish the index signed with " \
                                "the key the devices trust"


class Recording(Runner):
    """The real runner, noting each command, its check= and the mode of the GnuPG home it
    names when it runs (the tool-runner seam; gpg still runs for real)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[list[str], object, int | None]] = []

    def run(self, argv: Any, **kwargs: Any) -> Any:
        args = [str(a) for a in argv]
        home = Path(args[args.index("--homedir") + 1]) if "--homedir" in args else None
        mode = home.stat().st_mode & 0o777 if home is not None and home.exists() else None
        self.calls.append((args, kwargs.get("check", "unset"), mode))
        return super().run(argv, **kwargs)


def test_gpg_runs_in_a_private_throwaway_home_whose_daemons_are_stopped(
        keys: tuple[Key, Key], tmp_path: Path) -> None:
    """The home is under the run's scratch directory, which every run empties first: a
    killed run's home does not stay for long."""
    release, _ = keys
    data = b"{}"
    runner = Recording()
    verify_signature(runner, data, release.sign(data), [release.public], WHAT,
                     scratch=tmp_path)
    *gpg_calls, stop = runner.calls
    homes = {args[args.index("--homedir") + 1] for args, _, _ in runner.calls}
    assert len(homes) == 1
    [home] = homes
    assert Path(home).name.startswith("microshift-update-gpg-") and not Path(home).exists()
    assert Path(home).parent == tmp_path
    assert [(args[0], check, mode) for args, check, mode in gpg_calls] == \
        [("gpg", False, 0o700), ("gpg", False, 0o700)]  # a refusal is read, never raised
    assert stop == (["gpgconf", "--homedir", home, "--kill", "all"], False, 0o700)


def test_verifying_leaves_no_gnupg_home_and_no_agent_behind(
        keys: tuple[Key, Key], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release, _ = keys
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    data = b"{}"
    verify_signature(Runner(), data, release.sign(data), [release.public], WHAT)
    with pytest.raises(UpdateRefused):
        verify_signature(Runner(), data + b"!", release.sign(data), [release.public], WHAT)
    assert not list(scratch.iterdir())  # the throwaway homes are gone ...
    assert not [a for a in gpg_agents() if a.homedir.is_relative_to(scratch)]  # ... and agents


def test_an_expired_or_revoked_key_is_refused(tmp_path: Path) -> None:
    """Signed while the key was good; a device checking today must still refuse."""
    home = tmp_path / "gpg"
    home.mkdir(mode=0o700)

    def gpg(*args: str, data: bytes | None = None) -> bytes:
        return subprocess.run(["gpg", "--homedir", str(home), "--batch", "--pinentry-mode",
                               "loopback", "--passphrase", "", *args], input=data,
                              capture_output=True, check=True).stdout

    past = ["--faked-system-time", "20200101T000000!", "--ignore-time-conflict"]
    gpg(*past, "--quick-gen-key", "Old <old@example.invalid>", "ed25519", "sign", "1d")
    data = b'{"index": 1}\n'
    signature = gpg(*past, "--detach-sign", "--output", "-", data=data)
    expired = tmp_path / "expired.asc"
    expired.write_bytes(gpg("--armor", "--export"))
    with pytest.raises(UpdateRefused, match=r"\(EXPKEYSIG\)"):
        verify_signature(Runner(), data, signature, [expired], WHAT)

    gpg(*past, "--quick-gen-key", "Lasting <lasting@example.invalid>", "ed25519", "sign",
        "never")
    signature = gpg(*past, "--local-user", "Lasting", "--default-sig-expire", "1d",
                    "--detach-sign", "--output", "-", data=data)
    lasting = tmp_path / "lasting.asc"
    lasting.write_bytes(gpg("--armor", "--export", "Lasting"))
    with pytest.raises(UpdateRefused, match=r"\(EXPSIG\)"):  # the signature itself expired
        verify_signature(Runner(), data, signature, [lasting], WHAT)

    gpg("--quick-gen-key", "Revoked <revoked@example.invalid>", "ed25519", "sign", "never")
    fingerprint = next(line.split(":")[9] for line in gpg(
        "--with-colons", "--list-secret-keys", "Revoked").decode().splitlines()
        if line.startswith("fpr:"))
    signature = gpg("--local-user", fingerprint, "--detach-sign", "--output", "-", data=data)
    certificate = (home / "openpgp-revocs.d" / f"{fingerprint}.rev").read_text()
    gpg("--import", data=certificate.replace(":-----BEGIN", "-----BEGIN").encode())
    revoked = tmp_path / "revoked.asc"
    revoked.write_bytes(gpg("--armor", "--export", fingerprint))
    try:
        with pytest.raises(UpdateRefused, match=r"\(REVKEYSIG\)"):
            verify_signature(Runner(), data, signature, [revoked], WHAT)
    finally:
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], check=False)


def test_no_keys_is_a_refusal_not_a_pass(keys: tuple[Key, Key]) -> None:
    release, _ = keys
    data = b"{}"
    with pytest.raises(UpdateRefused, match=f"^{WHAT}: no keys to verify its signature with"):
        verify_signature(Runner(), data, release.sign(data), [], WHAT)


def test_a_keyring_that_is_not_a_key_verifies_nothing(keys: tuple[Key, Key],
                                                      tmp_path: Path) -> None:
    release, _ = keys
    junk = tmp_path / "junk.gpg"
    junk.write_bytes(b"not a key")
    with pytest.raises(UpdateRefused, match=r"\(ERRSIG\)"):
        verify_signature(Runner(), b"{}", release.sign(b"{}"), [junk], WHAT)


# --- the index's contents ----------------------------------------------------------------
def entry(**changes: Any) -> dict[str, Any]:
    base = {"file": f"{OLD}-{NEW}.delta", "from_commit": OLD, "to_commit": NEW,
            "bytes": 1234, "sha256": SHA}
    return {**base, **changes}


def index(**changes: Any) -> bytes:
    doc = {"format": INDEX_FORMAT, "ref": REF, "to_commit": NEW, "to_version": "4.14.3",
           "files": [entry(), entry(file=f"empty-{NEW}.delta", from_commit=None)]}
    return json.dumps({**doc, **changes}).encode()


def test_a_good_index_lists_the_delta_from_each_commit() -> None:
    parsed = parse_index(index(), REF, WHAT)
    assert (parsed.ref, parsed.to_commit, parsed.to_version) == (REF, NEW, "4.14.3")
    found = parsed.delta_from(OLD)
    assert found is not None
    assert (found.file, found.from_commit, found.to_commit, found.size, found.sha256) == \
        (f"{OLD}-{NEW}.delta", OLD, NEW, 1234, SHA)
    assert parsed.delta_from("d" * 64) is None
    assert parse_index(index(to_version=None), REF, WHAT).to_version is None
    tiny = parse_index(index(files=[entry(bytes=1)]), REF, WHAT).delta_from(OLD)
    assert tiny is not None and tiny.size == 1  # the smallest file is still a file


@pytest.mark.parametrize(("data", "problem"), [
    (b"\xff\xfe", "is not UTF-8 text (byte 0)"),
    (b"[1, 2", "is not JSON (line 1 column 6: Expecting ',' delimiter)"),
    (b"[]", "is a list; allowed: an object"),
    (b"[" * 200_000 + b"]" * 200_000, "is nested 200000 levels deep; allowed: at most 16"),
    (index(format="other/v2"), f"format is 'other/v2'; allowed: {INDEX_FORMAT}"),
    (index(ref="microshift/x86_64/other"), "lists ref 'microshift/x86_64/other', the device "
                                           f"tracks '{REF}'"),
    (index(ref={"a": 1}), "ref is an object; allowed: a string"),
    (index(to_commit="B" * 64), "to_commit is 'BBBB"),
    (index(to_commit=None), "to_commit is null; allowed: a commit checksum"),
    (index(to_version={"major": 4}), "to_version is an object; allowed: a string or null"),
    (index(to_version=7), "to_version is an integer; allowed: a string or null"),
    (index(to_version="4" * 257), "to_version is '4444"),   # a version, not a payload
    (index(ref="r" * 1025), "ref is 'rrrr"),
    (index(files={"a": 1}), "files is an object; allowed: a list"),
    (index(files=["x"]), "files[0] is a string; allowed: an object"),
    (index(files=[entry(file="../../etc/passwd")]),
     "files[0].file is '../../etc/passwd'; allowed: FROM-TO.delta"),
    (index(files=[entry(file=7)]), "files[0].file is an integer; allowed: FROM-TO.delta"),
    (index(files=[entry(to_commit=OLD)]),
     f"files[0].to_commit is '{OLD}'; allowed: the index's to_commit {NEW[:12]}"),
    (index(files=[entry(from_commit="x")]),
     "files[0].from_commit is 'x'; allowed: a commit checksum or null"),
    (index(files=[entry(from_commit=5)]),
     "files[0].from_commit is an integer; allowed: a commit checksum or null"),
    (index(files=[entry(bytes=True)]),
     "files[0].bytes is true or false; allowed: an integer from 1 to"),
    (index(files=[entry(bytes=0)]), "files[0].bytes is 0; allowed: an integer from 1 to"),
    (index(files=[entry(bytes="12")]), "files[0].bytes is a string; allowed: an integer"),
    (index(files=[entry(sha256="z" * 64)]), "files[0].sha256 is 'zzzz"),
    (index(files=[entry(sha256=None)]), "files[0].sha256 is null; allowed: a sha256"),
    (index(files=[entry(from_commit="d" * 64)]),
     f"file '{OLD}-{NEW}.delta' should be named {'d' * 64}-{NEW}.delta"),
    (index(files=[entry(from_commit=None)]),
     f"file '{OLD}-{NEW}.delta' should be named empty-{NEW}.delta"),
    (b'{"format": "x", "format": "y"}', "is not JSON (key 'format' given twice)"),
    (index(files=[entry(bytes=10 ** 40)]), "is not JSON (an integer of 41 digits)"),
])
def test_an_index_the_device_must_not_trust_is_refused(data: bytes, problem: str) -> None:
    with pytest.raises(UpdateRefused) as caught:
        parse_index(data, REF, WHAT)
    assert str(caught.value).startswith(f"{WHAT}: {problem}"), str(caught.value)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 400  # one line



@pytest.mark.parametrize(("data", "message"), [
    (index(files=[entry(to_commit=OLD)]),
     f"files[0].to_commit is '{OLD}'; allowed: the index's to_commit {NEW[:12]}"),
    (index(to_commit="B" * 64),
     f"to_commit is '{'B' * 64}'; allowed: a commit checksum (64 hex digits)"),
    (index(files=[entry(bytes=2 ** 50 + 1)]),
     f"files[0].bytes is {2 ** 50 + 1}; allowed: an integer from 1 to {2 ** 50}"),
])
def test_a_refusal_says_exactly_what_is_allowed(data: bytes, message: str) -> None:
    """The whole line an admin reads: the bound (a petabyte, 2**50 bytes, is the largest
    delta file), the commit it must name, the form a checksum takes."""
    with pytest.raises(UpdateRefused) as caught:
        parse_index(data, REF, WHAT)
    assert str(caught.value) == f"{WHAT}: {message}"


# --- fetching it -------------------------------------------------------------------------
class Handler(BaseHTTPRequestHandler):
    bodies: ClassVar[dict[str, tuple[int, bytes]]] = {}

    finished: ClassVar[threading.Event] = threading.Event()

    def do_GET(self) -> None:
        if self.path == "/endless":  # no length, more than the limit, and never the end
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"z" * (MAX_METADATA + 1))
            self.wfile.flush()
            self.finished.wait(30)
            return
        status, body = self.bodies.get(self.path, (404, b""))
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    Handler.bodies = {"/index.json": (200, b"{}"), "/broken": (500, b"oops"),
                      "/huge": (200, b"x" * (MAX_METADATA + 1)),
                      "/limit": (200, b"y" * MAX_METADATA)}
    Handler.finished.clear()
    with ServedInThread(ThreadingHTTPServer(("127.0.0.1", 0), Handler), "index") as served:
        try:
            yield served.url
        finally:
            Handler.finished.set()  # before the shutdown, which waits for /endless


def test_fetching_the_index(server: str) -> None:
    fetched = fetch_small(f"{server}/index.json", FAST)
    assert fetched is not None and (fetched.data, fetched.url) == (b"{}", f"{server}/index.json")
    limit = fetch_small(f"{server}/limit", FAST)
    assert limit is not None and len(limit.data) == MAX_METADATA
    assert fetch_small(f"{server}/missing", FAST) is None  # no index: fall back to pull
    with pytest.raises(UpdateRefused, match=f"^{server}/huge is larger than {MAX_METADATA} "
                                            "bytes: not an update index"):
        fetch_small(f"{server}/huge", FAST)
    # A hostile server that never stops sending: refused once past the limit, not read on.
    with pytest.raises(UpdateRefused, match=f"^{server}/endless is larger than"):
        fetch_small(f"{server}/endless", FAST)
    with pytest.raises(BuildError, match=f"^GET {server}/broken: HTTP 500 "):
        fetch_small(f"{server}/broken", FAST)


def test_an_unreachable_server_is_a_failure_not_a_missing_index(
        closed_port_url: str) -> None:
    with pytest.raises(BuildError) as caught:
        fetch_small(f"{closed_port_url}/index.json", FAST)
    assert str(caught.value) == f"GET {closed_port_url}/index.json: [Errno 111] Connection refused"


def test_a_server_that_never_answers_times_out(silent_server: str) -> None:
    with pytest.raises(BuildError) as caught:
        fetch_small(f"{silent_server}/index.json", Patience(timeout=0.5))
    assert str(caught.value) == (f"GET {silent_server}/index.json: no complete answer within "
                                 "0.5 s (timeout_seconds)")


def test_an_index_on_a_usb_stick_is_read_like_one_served(tmp_path: Path) -> None:
    stick = tmp_path / "stick with space"
    stick.mkdir()
    (stick / "index.json").write_bytes(b"{}")
    (stick / "huge").write_bytes(b"x" * (MAX_METADATA + 1))
    (stick / "limit").write_bytes(b"y" * MAX_METADATA)
    (stick / "a-directory").mkdir()
    url = stick.as_uri()
    fetched = fetch_small(f"{url}/index.json", FAST)
    assert fetched is not None and (fetched.data, fetched.url) == (b"{}", f"{url}/index.json")
    # A stick without an index is a missing index (the device falls back to a pull), not an
    # error, as a 404 is.
    assert fetch_small(f"{url}/missing", FAST) is None
    limit = fetch_small(f"{url}/limit", FAST)
    assert limit is not None and len(limit.data) == MAX_METADATA
    with pytest.raises(UpdateRefused, match="huge is larger than"):
        fetch_small(f"{url}/huge", FAST)
    with pytest.raises(BuildError) as caught:
        fetch_small(f"{url}/a-directory", FAST)
    assert str(caught.value) == f"read {stick / 'a-directory'}: Is a directory"


class Answering(Runner):
    """gpg's verification answered with a given exit code and status lines (the tool-runner
    seam: what real gpg prints in cases a test cannot make it reach)."""

    def __init__(self, returncode: int, status: bytes) -> None:
        super().__init__()
        self.returncode, self.status = returncode, status

    def run(self, argv: Any, **kwargs: Any) -> Any:
        args = [str(a) for a in argv]
        if "--verify" in args:
            return subprocess.CompletedProcess(args, self.returncode, self.status, b"")
        return super().run(argv, **kwargs)


VALIDSIG = b"[GNUPG:] VALIDSIG " + b"A" * 40 + b" 2026-11-27 0 4 0 1 10 00 " + b"A" * 40 + b"\n"


def test_gpg_failing_is_a_refusal_even_after_a_good_signature_line(
        keys: tuple[Key, Key]) -> None:
    release, _ = keys
    with pytest.raises(UpdateRefused, match=r"\(no good signature\)"):
        verify_signature(Answering(2, VALIDSIG), b"{}", release.sign(b"{}"), [release.public],
                         WHAT)
    assert verify_signature(Answering(0, VALIDSIG), b"{}", release.sign(b"{}"),
                            [release.public], WHAT) == "A" * 40


def test_a_status_line_that_is_not_utf8_does_not_hide_the_verdict(
        keys: tuple[Key, Key]) -> None:
    release, _ = keys
    # gpg escapes what is not UTF-8 in its status lines; a gpg that did not (another build,
    # a damaged line) must still be read, not crash the update.
    status = b"[GNUPG:] GOODSIG " + b"A" * 16 + b" Ren\xe9 <r@example.com>\n" + VALIDSIG
    assert verify_signature(Answering(0, status), b"{}", release.sign(b"{}"),
                            [release.public], WHAT) == "A" * 40
