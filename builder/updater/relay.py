"""A bandwidth cap and request bounds for `ostree pull`: a relay on 127.0.0.1 that
forwards to the remote.

ostree has no rate limit of its own, and the fallback pull (no delta file from the booted
commit) can move far more than a delta, so the cap of update.yaml must hold there too. The
updater runs `ostree pull --url=http://127.0.0.1:PORT/ REMOTE REF`: ostree still verifies
every object and the commit's GPG signature with the remote's keys (the URL changes where
bytes come from, not what is trusted), and every byte it receives passes one token bucket
shared by all of ostree's concurrent requests. Without a cap the relay still carries the
pull: each request towards the remote is bounded as every other request of the updater is
(builder/updater/fetch.py: timeout, low speed, the run's deadline), so a delta part served
a byte at a time is cut (ostree then retries it) instead of holding the device.

Towards the remote the relay keeps connections alive (one TCP and TLS handshake per
connection, not per object: on LTE a handshake costs a round trip or three), honours the
remote's tls-* options, and follows redirects itself so that no byte bypasses the cap.
Runs on the device's Python 3.9 with the standard library.
"""

from __future__ import annotations

import http.client
import http.server
import queue
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from builder.core.http_thread import ServedInThread
from builder.updater.fetch import Patience, Stalled, Watch

CHUNK = 64 * 1024
MAX_REDIRECTS = 5
POOL = 8  # ostree keeps at most this many requests in flight per remote by default
FORWARDED = ("Range", "If-Modified-Since", "If-None-Match", "Accept", "User-Agent")
RELAYED = ("Content-Type", "Content-Length", "Content-Range", "Last-Modified", "ETag",
           "Cache-Control", "Accept-Ranges")
REDIRECTS = (301, 302, 303, 307, 308)


class Bucket:
    """At most `rate` bytes per second, whichever thread takes them (0: no cap). Each take
    reserves the next free slot of count/rate seconds; time left idle is not saved up for
    a burst."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.chunk = min(CHUNK, max(1024, rate // 20)) if rate else CHUNK
        self.lock = threading.Lock()
        self.free_at = time.monotonic()

    def take(self, count: int) -> None:
        """Wait until `count` bytes may be sent."""
        if not self.rate:
            return
        with self.lock:
            now = time.monotonic()
            start = max(self.free_at, now)
            self.free_at = start + count / self.rate
        if start > now:
            time.sleep(start - now)


@dataclass(frozen=True)
class Tls:
    """The remote's tls-* options, as ostree reads them."""

    permissive: bool = False
    ca_path: str | None = None
    client_cert: str | None = None
    client_key: str | None = None

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca_path)
        if self.permissive:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.client_cert:
            context.load_cert_chain(self.client_cert, self.client_key)
        return context


class OutsideRepository(Exception):
    """A request for something other than a file of the remote's repository."""


class Upstream:
    """Kept-alive connections to the remote's host."""

    def __init__(self, base: str, tls: Tls, patience: Patience) -> None:
        self.base = base if base.endswith("/") else base + "/"
        self.tls = tls
        self.patience = patience
        self.timeout = patience.timeout
        self.idle: queue.LifoQueue[http.client.HTTPConnection] = queue.LifoQueue(POOL)

    def connect(self, url: str) -> http.client.HTTPConnection:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme == "https":
            return http.client.HTTPSConnection(parts.netloc, timeout=self.timeout,
                                               context=self.tls.context())
        return http.client.HTTPConnection(parts.netloc, timeout=self.timeout)

    def open(self, path: str, headers: dict[str, str]
             ) -> tuple[http.client.HTTPResponse, http.client.HTTPConnection | None, Watch]:
        """The remote's response to GET base+path, redirects followed; the connection to
        give back once the body is read (None: not the remote's host, close it), and the
        watchdog of the body (stop it when done)."""
        url = urllib.parse.urljoin(self.base, path.lstrip("/"))
        segments = urllib.parse.unquote(urllib.parse.urlsplit(url).path).split("/")
        if not url.startswith(self.base) or ".." in segments:
            # Not an open proxy: only the remote's repository, whoever asks on 127.0.0.1.
            raise OutsideRepository(path)
        for _ in range(MAX_REDIRECTS + 1):
            own = _origin(url) == _origin(self.base)
            watch = Watch(url, self.patience)
            try:
                connection, response = self._request(url, headers, own, watch)
            except (OSError, http.client.HTTPException) as exc:
                watch.stop()
                raise watch.failure(exc) from None
            except BaseException:
                watch.stop()
                raise
            watch.body()
            if response.status not in REDIRECTS:
                return response, connection if own else None, watch
            location = response.getheader("Location") or ""
            response.read(64 * 1024)
            watch.stop()
            if own and not response.will_close and response.isclosed():
                self.give_back(connection)
            else:
                connection.close()
            url = urllib.parse.urljoin(url, location)
            if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
                raise http.client.HTTPException(f"redirect to {url!r}")
        raise http.client.HTTPException(f"more than {MAX_REDIRECTS} redirects from {path}")

    def _request(self, url: str, headers: dict[str, str], own: bool, watch: Watch
                 ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        target = urllib.parse.urlsplit(url)
        selector = urllib.parse.urlunsplit(("", "", target.path or "/", target.query, ""))
        while True:
            kept = self._take() if own else None
            connection = kept or self.connect(url)
            try:
                if connection.sock is None:
                    connection.connect()
                watch.attach(connection.sock)
                connection.request("GET", selector, headers=headers)
                return connection, connection.getresponse()
            except (OSError, http.client.HTTPException):
                connection.close()
                if kept is None:  # a kept-alive connection the server closed: try a new one
                    raise

    def _take(self) -> http.client.HTTPConnection | None:
        try:
            return self.idle.get_nowait()
        except queue.Empty:
            return None

    def give_back(self, connection: http.client.HTTPConnection) -> None:
        try:
            self.idle.put_nowait(connection)
        except queue.Full:
            connection.close()

    def close(self) -> None:
        while (connection := self._take()) is not None:
            connection.close()


def _origin(url: str) -> tuple[str, str]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, parts.netloc


class Relay:
    """`with Relay(url, rate) as relay: ostree pull --url=relay.url ...`"""

    def __init__(self, upstream: str, rate: int, tls: Tls = Tls(),
                 patience: Patience | None = None) -> None:
        if rate < 0:
            raise ValueError(f"a relay needs a rate of 0 (no cap) or more, got {rate}")
        self.upstream = Upstream(upstream, tls, patience or Patience())
        self.bucket = Bucket(rate)
        self.lock = threading.Lock()
        self.received = 0   # body bytes from the remote
        self.requests = 0
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        server.daemon_threads = True
        self.served = ServedInThread(server, name="relay")

    @property
    def url(self) -> str:
        return self.served.url + "/"

    def __enter__(self) -> Relay:
        self.served.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.served.__exit__()
        self.upstream.close()

    def count(self, received: int, requests: int = 0) -> None:
        with self.lock:
            self.received += received
            self.requests += requests


def _handler(relay: Relay) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        # HTTP/1.0 towards ostree: one request per loopback connection, so a body of
        # unknown length ends when the connection does.
        protocol_version = "HTTP/1.0"

        def do_GET(self) -> None:
            headers = {k: v for k in FORWARDED if (v := self.headers.get(k)) is not None}
            relay.count(0, 1)
            try:
                response, connection, watch = relay.upstream.open(self.path, headers)
            except OutsideRepository as exc:
                self.send_error(403, f"not in the remote's repository: {exc}")
                return
            except (OSError, http.client.HTTPException) as exc:
                # A gateway timeout tells ostree to try again, as a cut does.
                code = 504 if isinstance(exc, Stalled) else 502
                self.send_error(code, f"no answer from the remote to relay: {exc}")
                return
            try:
                self._relay(response, connection, watch)
            finally:
                watch.stop()

        def _relay(self, response: http.client.HTTPResponse,
                   connection: http.client.HTTPConnection | None, watch: Watch) -> None:
            self.send_response(response.status, response.reason)
            for name in RELAYED:
                value = response.getheader(name)
                if value is not None:
                    self.send_header(name, value)
            self.end_headers()
            try:
                while data := _read_some(response, relay.bucket.chunk):
                    watch.progress(len(data))
                    if response.isclosed():
                        # The whole body is in hand: the connection serves the next request
                        # while this one's last chunk waits for the cap and goes out.
                        watch.stop()
                        _give_back(relay, response, connection)
                        connection = None
                    relay.count(len(data))
                    relay.bucket.take(len(data))
                    self.wfile.write(data)
                _give_back(relay, response, connection)
                connection = None
            except (OSError, http.client.HTTPException):
                pass  # ostree retries a cut request; the relay closes both sides
            finally:
                if connection is not None:
                    connection.close()

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the updater logs the pull as one step; ostree reports its own errors

    return Handler


def _read_some(response: http.client.HTTPResponse, size: int) -> bytes:
    """What has arrived of the body, at most `size` bytes (read1: a dribbling remote is seen
    byte by byte, not after `size` of them). read1 does not mark a body read to its end as
    done, which the connection needs before it serves another request: read() does."""
    data = response.read1(size)
    if response.length == 0 and not response.isclosed():
        response.read()
    return data


def _give_back(relay: Relay, response: http.client.HTTPResponse,
               connection: http.client.HTTPConnection | None) -> None:
    """Keep the connection for the next request if the remote left it open."""
    if connection is not None and not response.will_close:
        relay.upstream.give_back(connection)
    elif connection is not None:
        connection.close()
