"""The relay that caps `ostree pull`: every byte passes it unchanged and under the cap, the
remote's answers (404, 304, ranges) reach ostree as the remote gave them, redirects are
followed inside the relay, and the remote sees kept-alive connections, not one per object.

Durations are asserted only from below: a cap is a floor on the time a transfer takes, and
a loaded machine can only make a transfer slower."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from builder.core.http_thread import ServedInThread
from builder.core.runner import Runner
from builder.updater.fetch import Patience
from builder.updater.pull import remote_tls, uncappable
from builder.updater.relay import Bucket, Relay, Tls
from builder.updater.system import System

BODY = os.urandom(300_000)
ETAG = '"v1"'


class _Origin(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _OriginHandler)
        self.files = {"/repo/config": b"[core]\nmode=archive-z2\n", "/repo/big": BODY}
        self.redirects: dict[str, str] = {}
        self.clients: set[int] = set()   # source ports: one per TCP connection
        self.seen: list[dict[str, str]] = []
        self.lock = threading.Lock()


class _OriginHandler(BaseHTTPRequestHandler):
    server: _Origin
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        srv = self.server
        with srv.lock:
            srv.clients.add(self.client_address[1])
            srv.seen.append(dict(self.headers.items()))
        if self.path in srv.redirects:
            target = srv.redirects[self.path]
            self._answer(302, b"", **({"Location": target} if target else {}))
        elif self.path not in srv.files:
            self._answer(404, b"no such file\n")
        elif self.headers.get("If-None-Match") == ETAG:
            self._answer(304, b"", ETag=ETAG)
        elif (wanted := self.headers.get("Range")) is not None:
            start = int(wanted.removeprefix("bytes=").split("-")[0])
            data = srv.files[self.path]
            self._answer(206, data[start:],
                         **{"Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"})
        else:
            self._answer(200, srv.files[self.path], ETag=ETAG)

    def _answer(self, status: int, body: bytes, **headers: str) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if status != 304:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def origin() -> Iterator[tuple[_Origin, str]]:
    server = _Origin()
    with ServedInThread(server, "origin") as served:
        yield server, served.url + "/repo/"


def _get(url: str, **headers: str) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read(), dict(response.headers.items())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers.items())


def test_bytes_pass_unchanged_and_are_counted(origin: tuple[_Origin, str]) -> None:
    _, base = origin
    with Relay(base, 10_000_000) as relay:
        status, body, headers = _get(relay.url + "big")
    assert status == 200 and body == BODY
    assert headers["Content-Length"] == str(len(BODY)) and headers["ETag"] == ETAG
    assert (relay.received, relay.requests) == (len(BODY), 1)


def test_the_remotes_answers_reach_ostree_as_given(origin: tuple[_Origin, str]) -> None:
    """ostree tells a missing superblock (404: pull objects) from a summary it has (304)."""
    server, base = origin
    with Relay(base, 10_000_000) as relay:
        missing = _get(relay.url + "deltas/ab/cd/superblock")
        cached = _get(relay.url + "big", **{"If-None-Match": ETAG})
        ranged = _get(relay.url + "big", Range="bytes=299990-")
    assert missing[0] == 404
    assert cached[0] == 304 and cached[1] == b""
    assert ranged[0] == 206 and ranged[1] == BODY[299_990:]
    assert ranged[2]["Content-Range"] == f"bytes 299990-{len(BODY) - 1}/{len(BODY)}"
    assert server.seen[0]["Host"] == base.split("/")[2]  # the remote's, not the relay's
    assert server.seen[1]["If-None-Match"] == ETAG and server.seen[2]["Range"] == "bytes=299990-"


def test_a_remote_url_without_its_trailing_slash_is_the_same_remote(
        origin: tuple[_Origin, str]) -> None:
    server, base = origin
    server.files["/repo/XATTRS"] = b"a name that starts like a slash-strip would not\n"
    with Relay(base.rstrip("/"), 10_000_000) as relay:
        assert _get(relay.url + "config")[:2] == (200, server.files["/repo/config"])
        assert _get(relay.url + "XATTRS")[:2] == (200, server.files["/repo/XATTRS"])


def test_a_remote_that_stops_answering_is_a_502_after_the_timeout(silent_server: str) -> None:
    """ostree waits on the relay; the relay must not wait on a dead link forever."""
    with Relay(silent_server + "/repo/", 1_000_000, patience=Patience(timeout=1.0)) as relay:
        status, body, _ = _get(relay.url + "config")
    assert status == 504 and b"no complete answer within 1 s (timeout_seconds)" in body


def test_the_remote_sees_kept_alive_connections(origin: tuple[_Origin, str]) -> None:
    server, base = origin
    with Relay(base, 100_000_000) as relay:
        for _ in range(12):
            assert _get(relay.url + "config")[1] == server.files["/repo/config"]
    assert len(server.seen) == 12 and len(server.clients) == 1


def test_a_redirect_is_followed_inside_the_relay(origin: tuple[_Origin, str]) -> None:
    """A client that saw the redirect would fetch from the new place around the cap."""
    server, base = origin
    other = _Origin()
    other.files["/mirror/big"] = BODY
    other.redirects["/mirror/moved"] = "/mirror/big"  # the mirror redirects too
    with ServedInThread(other, "mirror") as mirror:
        server.redirects["/repo/big"] = "/repo/moved"
        server.redirects["/repo/moved"] = mirror.url + "/mirror/moved"
        with Relay(base, 100_000_000) as relay:
            assert _get(relay.url + "config")[0] == 200  # a kept-alive connection to the remote
            status, body, headers = _get(relay.url + "big")
            # Connections stay with their hosts: the remote's next file comes from the remote.
            after = _get(relay.url + "config")
    assert status == 200 and body == BODY and "Location" not in headers
    assert after[:2] == (200, server.files["/repo/config"])
    assert relay.received == len(BODY) + 2 * len(server.files["/repo/config"])
    assert len(other.seen) == 2 and other.seen[1]["Host"] == mirror.url.split("/")[2]
    assert len(server.clients) == 1  # the redirects too went over the kept-alive connection


@pytest.mark.parametrize("hops", [5, 6])
def test_redirects_are_followed_five_times_at_most(origin: tuple[_Origin, str],
                                                   hops: int) -> None:
    server, base = origin
    for hop in range(hops):
        server.redirects[f"/repo/hop{hop}"] = f"/repo/hop{hop + 1}"
    server.files[f"/repo/hop{hops}"] = b"arrived\n"
    with Relay(base, 100_000_000) as relay:
        status, body, _ = _get(relay.url + "hop0")
    if hops == 5:
        assert (status, body) == (200, b"arrived\n")
    else:
        assert status == 502 and b"more than 5 redirects from /hop0" in body


@pytest.mark.parametrize(("location", "words"), [
    ("ftp://mirror.example/repo/big", b"redirect to 'ftp://mirror.example/repo/big'"),
    (None, b"more than 5 redirects from /big")])
def test_a_redirect_the_relay_cannot_follow_is_a_502(origin: tuple[_Origin, str],
                                                     location: str | None,
                                                     words: bytes) -> None:
    server, base = origin
    server.redirects["/repo/big"] = location  # type: ignore[assignment]
    with Relay(base, 100_000_000) as relay:
        status, body, _ = _get(relay.url + "big")
    assert status == 502 and words in body


@pytest.mark.parametrize("target", ["http://127.0.0.1:1/elsewhere", "/../secret",
                                    "/objects/../../secret", "/%2e%2e/secret"])
def test_only_the_remotes_repository_is_relayed(origin: tuple[_Origin, str],
                                                target: str) -> None:
    """Anyone on the device can reach 127.0.0.1 while a pull runs: the relay must not carry
    them (with the device's client certificate) anywhere but the repository."""
    server, base = origin
    with Relay(base, 1_000_000) as relay, \
            socket.create_connection(("127.0.0.1", int(relay.url.split(":")[2].strip("/")))
                                     ) as sock:
        sock.sendall(f"GET {target} HTTP/1.0\r\n\r\n".encode())
        answer = b"".join(iter(lambda: sock.recv(65536), b""))
    assert answer.startswith(f"HTTP/1.0 403 not in the remote's repository: {target}\r\n"
                             .encode())
    assert server.seen == [] and relay.received == 0


def test_a_remote_that_does_not_answer_is_a_502(closed_port_url: str) -> None:
    with Relay(closed_port_url + "/repo/", 1_000_000) as relay:
        status, body, _ = _get(relay.url + "config")
    assert status == 502 and b"no answer from the remote to relay: " in body


@pytest.mark.parametrize("clients", [1, 3])
def test_the_cap_holds_for_all_requests_together(origin: tuple[_Origin, str],
                                                 clients: int) -> None:
    """ostree fetches several objects at once: together they stay under the cap."""
    _, base = origin
    rate = 400_000
    with Relay(base, rate) as relay:
        started = time.monotonic()
        with ThreadPoolExecutor(clients) as pool:
            bodies = list(pool.map(lambda _: _get(relay.url + "big")[1], range(clients)))
        seconds = time.monotonic() - started
    assert bodies == [BODY] * clients
    # The first chunk of each slot goes at once; everything after waits for its slot.
    floor = (clients * len(BODY) - relay.bucket.chunk) / rate
    assert seconds >= floor, f"{clients * len(BODY)} bytes in {seconds:.2f}s at {rate} B/s"


def test_idle_time_is_not_saved_up_for_a_burst() -> None:
    bucket = Bucket(100_000)
    time.sleep(0.3)  # idle: a bucket that saved this up would let 30 000 bytes go at once
    started = time.monotonic()
    for _ in range(5):
        bucket.take(10_000)
    assert time.monotonic() - started >= 0.4 - 1e-3


def test_a_relay_rate_is_a_cap_or_none() -> None:
    with pytest.raises(ValueError, match="a rate of 0 \\(no cap\\) or more, got -1"):
        Relay("http://127.0.0.1:1/", -1)
    assert Bucket(0).chunk == 64 * 1024  # no cap: whole chunks, no waiting
    with Relay("http://127.0.0.1:1/", 1) as slowest, Relay("http://127.0.0.1:1/", 1) as other:
        assert slowest.url != other.url  # each on a port of its own


# --- TLS to the remote, with the remote's tls-* options ------------------------------------

def _certificate(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (it is also its own CA)."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", f"/CN={name}", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


@pytest.fixture
def tls_origin(tmp_path: Path) -> Iterator[tuple[_Origin, str, Path, Path, Path]]:
    """An HTTPS remote that also asks for a client certificate (it trusts client.crt)."""
    server_cert, server_key = _certificate(tmp_path, "remote")
    client_cert, client_key = _certificate(tmp_path, "device")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(server_cert, server_key)
    context.load_verify_locations(client_cert)
    context.verify_mode = ssl.CERT_OPTIONAL
    server = _Origin()
    server.socket = context.wrap_socket(server.socket, server_side=True)
    with ServedInThread(server, "tls-origin") as served:
        yield (server, served.url.replace("http://", "https://") + "/repo/", server_cert,
               client_cert, client_key)


def test_an_https_remote_is_verified_with_its_tls_ca_path(
        tls_origin: tuple[_Origin, str, Path, Path, Path]) -> None:
    server, base, ca, cert, key = tls_origin
    with Relay(base, 10_000_000, Tls(ca_path=str(ca), client_cert=str(cert),
                                     client_key=str(key)), patience=Patience(timeout=10)) as relay:
        status, body, _ = _get(relay.url + "big")
    assert (status, body) == (200, BODY)
    assert server.seen[0]["Host"] == base.split("/")[2]


def test_a_redirect_to_https_is_followed_with_the_remotes_tls_options(
        origin: tuple[_Origin, str], tls_origin: tuple[_Origin, str, Path, Path, Path]) -> None:
    server, base = origin
    secure, secure_base, ca, _, _ = tls_origin
    server.redirects["/repo/big"] = secure_base + "big"
    with Relay(base, 10_000_000, Tls(ca_path=str(ca)), patience=Patience(timeout=10)) as relay:
        assert _get(relay.url + "big")[:2] == (200, BODY)
    assert len(secure.seen) == 1


def test_an_https_remote_that_never_completes_its_handshake_times_out(
        silent_server: str) -> None:
    with Relay(silent_server.replace("http://", "https://") + "/repo/", 1_000_000,
               patience=Patience(timeout=1.0)) as relay:
        status, body, _ = _get(relay.url + "config")
    assert status == 504 and b"no complete answer within 1 s" in body


def test_an_https_remote_the_device_does_not_trust_is_a_502(
        tls_origin: tuple[_Origin, str, Path, Path, Path]) -> None:
    server, base, _, _, _ = tls_origin
    with Relay(base, 10_000_000, patience=Patience(timeout=10)) as relay:
        status, body, _ = _get(relay.url + "big")
    assert status == 502 and b"CERTIFICATE_VERIFY_FAILED" in body and server.seen == []


def test_tls_permissive_takes_any_certificate(
        tls_origin: tuple[_Origin, str, Path, Path, Path]) -> None:
    _, base, _, _, _ = tls_origin
    with Relay(base, 10_000_000, Tls(permissive=True), patience=Patience(timeout=10)) as relay:
        assert _get(relay.url + "config")[0] == 200


@pytest.fixture
def device_repo(tmp_path: Path) -> System:
    """A device root whose ostree repository has one remote, as an admin added it."""
    system = System(tmp_path, Runner())
    system.repo.mkdir(parents=True)
    system.ostree("init", "--mode=bare")
    system.ostree("remote", "add", "--set=gpg-verify=true", "edge", "https://updates.example/repo")
    return system


def _uncappable(system: System, remote: str, environ: dict[str, str]) -> str | None:
    return uncappable(system, remote, system.remote_option(remote, "url") or "", environ)


def test_a_plain_https_remote_is_capped(device_repo: System) -> None:
    assert _uncappable(device_repo, "edge", {}) is None


@pytest.mark.parametrize(("key", "value"), [("contenturl", "https://cdn.example/repo"),
                                            ("metalink", "https://updates.example/metalink"),
                                            ("proxy", "http://proxy.example:3128")])
def test_a_remote_whose_bytes_the_relay_cannot_carry_is_named(device_repo: System, key: str,
                                                              value: str) -> None:
    """ostree takes these from the remote's config whatever --url says: the pull would go
    around the relay (or, with a proxy, to the relay through the proxy)."""
    device_repo.ostree("config", "set", f'remote "edge".{key}', value)
    assert _uncappable(device_repo, "edge", {}) == (
        f"remote 'edge' has a {key}, which ostree uses whatever URL it is given")


def test_a_proxy_in_the_environment_is_named(device_repo: System) -> None:
    assert _uncappable(device_repo, "edge", {"https_proxy": "http://proxy.example:3128"}) == (
        "https_proxy is set: the pull goes through that proxy")
    assert _uncappable(device_repo, "edge", {"https_proxy": ""}) is None


def test_a_remote_without_an_http_url_is_named(device_repo: System) -> None:
    device_repo.ostree("remote", "add", "local", "file:///srv/repo")
    assert _uncappable(device_repo, "local", {}) == (
        "remote 'local' has no http(s) URL (file:///srv/repo)")


def test_the_remotes_tls_options_are_the_relays(device_repo: System) -> None:
    for key, value in (("tls-permissive", "true"), ("tls-ca-path", "/etc/pki/edge-ca.pem"),
                       ("tls-client-cert-path", "/etc/pki/device.crt"),
                       ("tls-client-key-path", "/etc/pki/device.key")):
        device_repo.ostree("config", "set", f'remote "edge".{key}', value)
    assert remote_tls(device_repo, "edge") == Tls(
        permissive=True, ca_path="/etc/pki/edge-ca.pem", client_cert="/etc/pki/device.crt",
        client_key="/etc/pki/device.key")
