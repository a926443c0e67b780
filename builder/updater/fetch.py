"""Every HTTP request the updater makes, bounded: a server that answers slowly, never
finishes, or dribbles a byte every few seconds cannot hold a device.

Three bounds, from /etc/microshift/update.yaml (builder/updater/update_config.py):

- `timeout_seconds`: to connect, and to send the complete status line and headers;
- `low_speed_bytes_per_second`: a body must average at least this over every window of
  `timeout_seconds` (as ostree's and curl's low-speed limit does; 0: at least one byte per
  window), else the request is stalled: a cut, retried and resumed like any other;
- `run_deadline_seconds`: when the run's deadline passes, every request ends and the run
  stops, saying what it was doing; the next run resumes where it stopped.

A socket timeout alone bounds none of them (a byte every two seconds resets it), so each
request has a watchdog thread that shuts its socket down when a bound is passed; the
blocked read then returns and the reader raises with the watchdog's reason. Proxies from the
environment (http_proxy, https_proxy, no_proxy) are honoured, as urllib does; redirects of
a GET are followed (at most 5).

Device side: Python 3.9, standard library only.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from email.message import Message
from typing import Any, NoReturn

from builder.core.errors import BuildError

REDIRECTS = (301, 302, 303, 307, 308)
MAX_REDIRECTS = 5
TICK = 0.2


@dataclass(frozen=True)
class Patience:
    """How long the updater waits on a server (see the module's text)."""

    timeout: float = 60.0
    low_speed: int = 1000
    deadline: float | None = None     # time.monotonic() when the run ends; None: never

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()


class Stalled(OSError):
    """A request that passed its timeout or low-speed bound: a cut, worth a retry."""


class DeadlineReached(BuildError):
    """The run's deadline passed: nothing more is fetched in this run."""


def check_deadline(patience: Patience, doing: str) -> None:
    left = patience.remaining()
    if left is not None and left <= 0:
        raise DeadlineReached(f"the run's deadline (run_deadline_seconds) passed while "
                              f"{doing}", hint="the next run resumes where this one stopped")


class Watch:
    """The watchdog of one request: shuts its socket down when a bound is passed."""

    def __init__(self, what: str, patience: Patience) -> None:
        self.what = what
        self.patience = patience
        self.lock = threading.Lock()
        self.sockets: list[socket.socket] = []
        self.started = time.monotonic()
        self.body_started: float | None = None
        self.window_start = 0.0
        self.window_bytes = 0
        self.received = 0
        self.reason: str | None = None
        self.deadline_hit = False
        self.stopped = False
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True, name="watch")
        self.thread.start()

    def attach(self, sock: socket.socket) -> socket.socket:
        with self.lock:
            self.sockets.append(sock)
            if self.reason is not None:
                _shut(sock)
        return sock

    def body(self) -> None:
        """The headers are in: from now on the low-speed bound applies."""
        with self.lock:
            self.body_started = self.window_start = time.monotonic()

    def progress(self, count: int) -> None:
        with self.lock:
            self.received += count
            self.window_bytes += count

    def stop(self) -> None:
        """From now on the socket is the caller's again (a relay gives it back to its pool):
        the watchdog never touches it after this returns."""
        with self.lock:
            self.stopped = True
        self.done.set()

    def _watch(self) -> None:
        while not self.done.wait(TICK):
            reason = self._passed(time.monotonic())
            if reason is not None:
                with self.lock:
                    if self.stopped:
                        return
                    self.reason = reason
                    for sock in self.sockets:
                        _shut(sock)
                return

    def _passed(self, now: float) -> str | None:
        patience = self.patience
        if patience.deadline is not None and now >= patience.deadline:
            self.deadline_hit = True
            return "the run's deadline (run_deadline_seconds) passed"
        with self.lock:
            if self.body_started is None:
                if now - self.started >= patience.timeout:
                    return (f"no complete answer within {patience.timeout:g} s "
                            "(timeout_seconds)")
                return None
            if now - self.window_start < patience.timeout:
                return None
            needed = max(1, int(patience.low_speed * patience.timeout))
            if self.window_bytes < needed:
                return (f"{self.window_bytes} bytes in {patience.timeout:g} s, under "
                        f"{patience.low_speed} bytes per second "
                        "(low_speed_bytes_per_second)")
            self.window_start, self.window_bytes = now, 0
        return None

    def failure(self, cause: BaseException | None = None) -> BaseException:
        """What a read or a request that the watchdog (or the server) ended raises."""
        if self.deadline_hit:
            return DeadlineReached(f"the run's deadline (run_deadline_seconds) passed while "
                                   f"fetching {self.what} ({self.received} bytes of it in "
                                   "this request)",
                                   hint="the next run resumes where this one stopped")
        # The caller names the request (GET URL, the file it downloads): the reason alone.
        if self.reason is not None:
            return Stalled(self.reason)
        if isinstance(cause, socket.timeout):  # the socket's own timeout came first
            timeout = self.patience.timeout
            return Stalled(f"no complete answer within {timeout:g} s (timeout_seconds)"
                           if self.body_started is None else
                           f"no byte for {timeout:g} s (timeout_seconds)")
        return cause if cause is not None else ConnectionError("the connection was cut")


def _reraise(failure: BaseException, cause: BaseException) -> NoReturn:
    if failure is cause:
        raise cause
    raise failure from cause


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class Response:
    """An answer whose body is read under the watchdog. Use as a context manager."""

    def __init__(self, url: str, connection: http.client.HTTPConnection,
                 answer: http.client.HTTPResponse, watch: Watch) -> None:
        self.url = url
        self.connection = connection
        self.answer = answer
        self.watch = watch
        self.status = answer.status
        self.reason = answer.reason
        self.headers: Message = answer.headers

    def header(self, name: str) -> str | None:
        return self.answer.getheader(name)

    def read(self, size: int) -> bytes:
        """At most `size` bytes, as soon as some are there; b"" at the end of the body."""
        try:
            data = self.answer.read1(size)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            _reraise(self.watch.failure(exc), exc)
        if not data and self.watch.reason is not None:
            raise self.watch.failure()
        self.watch.progress(len(data))
        return data

    def read_all(self, limit: int) -> bytes:
        """The whole body, or the first limit + 1 bytes of a longer one."""
        chunks: list[bytes] = []
        total = 0
        while total <= limit:
            data = self.read(min(64 * 1024, limit + 1 - total))
            if not data:
                break
            chunks.append(data)
            total += len(data)
        return b"".join(chunks)

    def close(self) -> None:
        self.watch.stop()
        self.connection.close()

    def __enter__(self) -> Response:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def request(url: str, patience: Patience, *, method: str = "GET",
            headers: dict[str, str] | None = None, body: bytes | None = None) -> Response:
    """The server's answer to one request (redirects of a GET followed), its headers in;
    the caller reads the body. Raises Stalled, DeadlineReached, or OSError/HTTPException
    for a refused or broken connection."""
    check_deadline(patience, f"asking for {url}")
    for _ in range(MAX_REDIRECTS + 1):
        response = _once(url, patience, method, headers or {}, body)
        if method != "GET" or response.status not in REDIRECTS:
            return response
        location = response.header("Location") or ""
        response.close()
        url = urllib.parse.urljoin(url, location)
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise http.client.HTTPException(f"redirect to {url!r}")
    raise http.client.HTTPException(f"more than {MAX_REDIRECTS} redirects from {url}")


def _once(url: str, patience: Patience, method: str, headers: dict[str, str],
          body: bytes | None) -> Response:
    watch = Watch(url, patience)
    connection, selector = _connection(url, patience.timeout)
    # The socket, as soon as it exists: connecting and a TLS handshake are watched too.
    create = connection._create_connection  # type: ignore[attr-defined]
    connection._create_connection = (  # type: ignore[attr-defined]
        lambda *args, **kwargs: watch.attach(create(*args, **kwargs)))
    try:
        connection.request(method, selector, body=body, headers=headers)
        answer = connection.getresponse()
    except (OSError, http.client.HTTPException) as exc:
        watch.stop()
        connection.close()
        _reraise(watch.failure(exc), exc)
    except BaseException:
        watch.stop()
        connection.close()
        raise
    watch.body()
    return Response(url, connection, answer, watch)


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    """A connection for `url` (through the environment's proxy for its scheme, unless
    no_proxy names its host) and the request target to send on it."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise http.client.InvalidURL(f"not an http(s) URL: {url}")
    selector = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    proxy = _proxy(parts.scheme, parts.hostname)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    kind: Any = http.client.HTTPSConnection if parts.scheme == "https" else \
        http.client.HTTPConnection
    extra: dict[str, Any] = {"context": ssl.create_default_context()} \
        if parts.scheme == "https" else {}
    if proxy is None:
        return kind(parts.hostname, port, timeout=timeout, **extra), selector
    proxy_parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    proxy_host, proxy_port = proxy_parts.hostname or "", proxy_parts.port or 3128
    if parts.scheme == "http":
        # A plain proxy takes the absolute URL as the request target.
        return http.client.HTTPConnection(proxy_host, proxy_port, timeout=timeout), url
    connection = kind(proxy_host, proxy_port, timeout=timeout, **extra)
    connection.set_tunnel(parts.hostname, port)
    return connection, selector


def _proxy(scheme: str, host: str) -> str | None:
    proxies = urllib.request.getproxies()
    proxy = proxies.get(scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    return proxy
