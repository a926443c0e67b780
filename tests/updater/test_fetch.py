"""Every request of the updater is bounded (builder/updater/fetch.py): against servers that
dribble, stall their headers, never end or never answer, a request ends within its bounds
and says which one it passed; a request to a good server, through a redirect or a proxy,
gets its answer. Real sockets on loopback, short bounds."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from builder.core.http_thread import ServedInThread
from builder.updater.fetch import DeadlineReached, Patience, Stalled, request

BODY = bytes(range(256)) * 40


class Hostile(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    stop: ClassVar[threading.Event] = threading.Event()

    def do_GET(self) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            getattr(self, "_" + self.path.strip("/").replace("-", "_"))()

    def _good(self) -> None:
        self._head(200, len(BODY))
        self.wfile.write(BODY)

    def _redirect(self) -> None:
        self.send_response(302)
        self.send_header("Location", "/good")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _loop(self) -> None:
        self.send_response(302)
        self.send_header("Location", "/loop")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _dribble(self) -> None:  # a byte every 0.3 s: never silent, never getting anywhere
        self._head(200, len(BODY))
        for byte in BODY:
            if self.stop.wait(0.3):
                return
            self.wfile.write(bytes([byte]))
            self.wfile.flush()

    def _slow_headers(self) -> None:
        for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx":
            if self.stop.wait(0.3):
                return
            self.wfile.write(bytes([byte]))
            self.wfile.flush()

    def _steady(self) -> None:  # 4 KiB every 0.1 s: slow, but above 1000 B/s
        self._head(200, 40 * 4096)
        for _ in range(40):
            self.wfile.write(b"s" * 4096)
            self.wfile.flush()
            time.sleep(0.1)

    def _head(self, status: int, length: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def hostile() -> Iterator[str]:
    Hostile.stop.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    server.daemon_threads = True
    with ServedInThread(server, "hostile") as served:
        try:
            yield served.url
        finally:
            Hostile.stop.set()


def _read(url: str, patience: Patience) -> bytes:
    with request(url, patience) as response:
        return response.read_all(10 * len(BODY))


def test_a_good_answer_and_a_redirect_are_read_whole(hostile: str) -> None:
    assert _read(f"{hostile}/good", Patience(timeout=5)) == BODY
    assert _read(f"{hostile}/redirect", Patience(timeout=5)) == BODY


def test_a_redirect_loop_ends(hostile: str) -> None:
    with pytest.raises(Exception, match="more than 5 redirects"):
        _read(f"{hostile}/loop", Patience(timeout=5))


def test_a_body_dribbled_a_byte_at_a_time_is_stalled_by_the_low_speed_bound(
        hostile: str) -> None:
    """The socket never times out (a byte comes every 0.3 s); the low-speed bound ends it
    after its window, naming the bound."""
    started = time.monotonic()
    with pytest.raises(Stalled) as caught:
        _read(f"{hostile}/dribble", Patience(timeout=1.5, low_speed=1000))
    assert time.monotonic() - started < 6
    assert "bytes in 1.5 s, under 1000 bytes per second (low_speed_bytes_per_second)" in \
        str(caught.value)


def test_headers_dribbled_a_byte_at_a_time_end_at_the_timeout(hostile: str) -> None:
    started = time.monotonic()
    with pytest.raises(Stalled) as caught:
        _read(f"{hostile}/slow-headers", Patience(timeout=1.5))
    assert time.monotonic() - started < 6
    assert str(caught.value) == ("no complete answer within 1.5 s "
                                 "(timeout_seconds)")


def test_a_slow_but_steady_body_is_not_a_stall(hostile: str) -> None:
    """About 40 KB/s for 4 s: above the bound in every window, so it is read whole."""
    with request(f"{hostile}/steady", Patience(timeout=1.0, low_speed=1000)) as response:
        assert len(response.read_all(1 << 20)) == 40 * 4096


def test_the_run_s_deadline_ends_a_request_that_no_other_bound_would(hostile: str) -> None:
    """With no low-speed bound (0: only silence stalls), the dribble goes on; the deadline
    ends it, and it is not a cut to retry but the end of the run."""
    started = time.monotonic()
    deadline = started + 2.0
    with pytest.raises(DeadlineReached) as caught:
        _read(f"{hostile}/dribble", Patience(timeout=5, low_speed=0, deadline=deadline))
    assert time.monotonic() - started < 6
    assert str(caught.value).startswith(
        f"the run's deadline (run_deadline_seconds) passed while fetching {hostile}/dribble (")
    assert caught.value.hint == "the next run resumes where this one stopped"
    with pytest.raises(DeadlineReached):  # past the deadline, no request starts at all
        _read(f"{hostile}/good", Patience(timeout=5, deadline=deadline))


def test_a_server_that_accepts_and_says_nothing_ends_at_the_timeout() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/index.json"
        started = time.monotonic()
        with pytest.raises(Stalled, match="no complete answer within 1 s"):
            _read(url, Patience(timeout=1.0))
        assert time.monotonic() - started < 5


def test_a_plain_http_proxy_from_the_environment_is_used(
        hostile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """http_proxy is honoured as urllib honours it: the proxy gets the absolute URL."""
    seen: list[str] = []

    class Proxy(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"proxy")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with ServedInThread(ThreadingHTTPServer(("127.0.0.1", 0), Proxy), "proxy") as proxy:
        monkeypatch.setenv("http_proxy", proxy.url)
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        url = "http://updates.example.invalid/edge/index.json"
        assert _read(url, Patience(timeout=5)) == b"proxy"
        monkeypatch.setenv("no_proxy", "updates.example.invalid")
        with pytest.raises(OSError):  # not through the proxy: the name does not resolve
            _read(url, Patience(timeout=5))
    assert seen == [url]
