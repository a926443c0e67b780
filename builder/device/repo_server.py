"""Serve a published ostree repository over HTTP to the simulated device.

A plain static file server (like `python -m http.server`), plus what the link simulation
needs: a per-request delay that models the link's round trip on the serving side (the `tbf`
qdisc shapes rate but cannot delay), a switch that cuts transfers mid-way (the link drops), and
counters of requests and bytes served.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from builder.core.http_thread import ServedInThread

CHUNK = 64 * 1024


@dataclass
class ServeStats:
    requests: int = 0
    body_bytes: int = 0
    cut_transfers: int = 0


class _RepoHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, root: Path, address: tuple[str, int]) -> None:
        super().__init__(address, _RepoHandler)
        self.root = root.resolve()
        self.latency = 0.0
        self.cut_after: int | None = None  # bytes of body served before the link drops
        self.stats = ServeStats()
        self.lock = threading.Lock()


class _RepoHandler(BaseHTTPRequestHandler):
    server: _RepoHTTPServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._serve(send_body=True)

    def do_HEAD(self) -> None:
        self._serve(send_body=False)

    def _serve(self, *, send_body: bool) -> None:
        srv = self.server
        with srv.lock:
            srv.stats.requests += 1
        if srv.latency:
            time.sleep(srv.latency)
        path = self._resolve()
        if path is None:
            self.send_error(404)
            return
        size = path.stat().st_size
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        if send_body:
            with path.open("rb") as handle:
                self._copy(handle)

    def _copy(self, handle: Any) -> None:
        srv = self.server
        while chunk := handle.read(CHUNK):
            with srv.lock:
                allowed = len(chunk)
                if srv.cut_after is not None:
                    allowed = max(0, min(allowed, srv.cut_after - srv.stats.body_bytes))
                srv.stats.body_bytes += allowed
                if allowed < len(chunk):
                    srv.stats.cut_transfers += 1
            if allowed:
                self.wfile.write(chunk[:allowed])
            if allowed < len(chunk):
                # The link dropped: end the connection with the body incomplete.
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return

    def _resolve(self) -> Path | None:
        rel = self.path.split("?", 1)[0].lstrip("/")
        path = (self.server.root / rel).resolve()
        if not path.is_relative_to(self.server.root) or not path.is_file():
            return None
        return path

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the simulation reports totals, not every object fetched."""


class RepoServer(ServedInThread):
    """Serve `root` on `host` (a free port) from a thread while in use.

    `make_server` lets the caller create the listening socket elsewhere, e.g. inside a network
    namespace (see builder.device.netlink.in_netns); the serving thread may run anywhere.
    """

    def __init__(self, root: Path, host: str = "127.0.0.1", port: int = 0, *,
                 latency: float = 0.0,
                 make_server: Callable[[Callable[[], _RepoHTTPServer]], _RepoHTTPServer]
                 | None = None) -> None:
        if not (root / "config").is_file():
            from builder.core.errors import BuildError
            raise BuildError(f"{root} is not an ostree repository (no config file)")

        def factory() -> _RepoHTTPServer:
            return _RepoHTTPServer(root, (host, port))

        httpd = make_server(factory) if make_server else factory()
        httpd.latency = latency
        super().__init__(httpd, name=f"ostree-repo-server:{os.fspath(root)}")
        self._httpd: _RepoHTTPServer = httpd

    @property
    def url(self) -> str:
        return super().url + "/"

    @property
    def stats(self) -> ServeStats:
        with self._httpd.lock:
            return ServeStats(**vars(self._httpd.stats))

    def drop_link_after(self, nbytes: int | None) -> None:
        """Cut every transfer once `nbytes` of body have been served; None restores the link."""
        with self._httpd.lock:
            served = self._httpd.stats.body_bytes
            self._httpd.cut_after = None if nbytes is None else served + nbytes
