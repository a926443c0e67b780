"""Serve a published ostree repository over HTTP to the simulated device.

A plain static file server (like `python -m http.server`, with single-range requests as
nginx or Apache answer them), plus what the link simulation needs: a per-request delay that
models the link's round trip on the serving side (the `tbf` qdisc shapes rate but cannot
delay), switches that cut transfers mid-way (the link drops: after N bytes, or at given
offsets of the delta files, ostree's or image mode's), and counters of requests, bytes and
the byte ranges served.

The repository is served at /, or, with `mounts`, as a published site is laid out
(builder/publish/upload.py): /repo/ and /updates/ from their own directories.

`misbehave` makes it a hostile server for the paths matching a pattern, as the updater's
hostile tests need (tests/updater/test_hostile.py): `dribble` sends the body a byte at a
time, `slow-headers` the status line and headers a byte at a time, `endless` a body that
never ends, `404` says the file is not there, `500` that the server failed.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from builder.core.http_thread import ServedInThread

CHUNK = 64 * 1024
BEHAVIOURS = ("dribble", "slow-headers", "endless", "404", "500")


RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
# ostree's static delta files and image mode's oci-delta files: what cuts and counts aim at
DELTA_SUFFIXES = (".delta", ".oci-delta.tar")


@dataclass
class ServeStats:
    requests: int = 0
    body_bytes: int = 0
    cut_transfers: int = 0
    # (path, first byte, bytes) of every response body served from a delta file
    delta_ranges: list[tuple[str, int, int]] = field(default_factory=list)

    def duplicate_delta_bytes(self) -> int:
        """Bytes of delta files served more than once (a resume that re-fetched)."""
        seen: dict[str, list[tuple[int, int]]] = {}
        duplicate = 0
        for path, start, length in self.delta_ranges:
            spans = seen.setdefault(path, [])
            for first, end in spans:
                duplicate += max(0, min(end, start + length) - max(first, start))
            spans.append((start, start + length))
        return duplicate


class _RepoHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, mounts: dict[str, Path], address: tuple[str, int]) -> None:
        super().__init__(address, _RepoHandler)
        self.mounts = {prefix: path.resolve() for prefix, path in mounts.items()}
        self.latency = 0.0
        self.cut_after: int | None = None  # bytes of body served before the link drops
        self.cut_points: list[int] = []    # offsets in .delta files where the link drops
        self.stats = ServeStats()
        self.lock = threading.Lock()
        self.hostile: list[tuple[re.Pattern[str], str]] = []
        self.hostile_interval = 1.0    # seconds between the bytes a dribble sends


class _RepoHandler(BaseHTTPRequestHandler):
    server: _RepoHTTPServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.dribble = False
        try:
            self._serve(send_body=True)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away mid-body: its choice

    def do_HEAD(self) -> None:
        self._serve(send_body=False)

    def _serve(self, *, send_body: bool) -> None:
        srv = self.server
        with srv.lock:
            srv.stats.requests += 1
        if srv.latency:
            time.sleep(srv.latency)
        how = next((how for pattern, how in srv.hostile if pattern.search(self.path)), None)
        if how is not None and self._misbehave(how):
            return
        path = self._resolve()
        if path is None:
            self.send_error(404)
            return
        size = path.stat().st_size
        span = self._range(size)
        if span is None:
            return
        start, end = span
        partial = (start, end) != (0, size)
        self.send_response(206 if partial else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(end - start))
        if partial:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        self.end_headers()
        if send_body:
            with path.open("rb") as handle:
                handle.seek(start)
                self._copy(handle, path, start, end)

    def _misbehave(self, how: str) -> bool:
        """Play the hostile server; False when the answer is the file after all (dribble,
        whose slowness is in _copy)."""
        interval = self.server.hostile_interval
        if how in ("404", "500"):
            self.send_error(int(how))
        elif how == "slow-headers":
            head = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"
            for byte in head:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(interval)
        elif how == "endless":
            self.send_response(200)
            self.end_headers()
            while True:
                self.wfile.write(b"{" * 4096)
                self.wfile.flush()
                time.sleep(interval / 100)
        else:
            self.dribble = True
            return False
        self.close_connection = True
        return True

    def _range(self, size: int) -> tuple[int, int] | None:
        """(first byte, end) to send; None when a 416 was answered."""
        header = self.headers.get("Range")
        if not header:
            return 0, size
        match = RANGE.match(header.strip())
        if match is None:
            return 0, size  # a form this server does not serve: the whole file, as 200
        start = int(match.group(1))
        end = min(size, int(match.group(2)) + 1) if match.group(2) else size
        if start >= size or start >= end:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        return start, end

    def _copy(self, handle: Any, path: Path, start: int, end: int) -> None:
        srv = self.server
        is_delta = path.name.endswith(DELTA_SUFFIXES)
        offset = start
        dribble = getattr(self, "dribble", False)
        while offset < end:
            if dribble:
                time.sleep(srv.hostile_interval)
            chunk = handle.read(1 if dribble else min(CHUNK, end - offset))
            if not chunk:
                break
            with srv.lock:
                allowed = self._allowed(len(chunk), offset if is_delta else None)
                srv.stats.body_bytes += allowed
                if is_delta:
                    srv.stats.delta_ranges.append((path.name, offset, allowed))
                if allowed < len(chunk):
                    srv.stats.cut_transfers += 1
            if allowed:
                self.wfile.write(chunk[:allowed])
            offset += allowed
            if allowed < len(chunk):
                # The link dropped: end the connection with the body incomplete.
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return

    def _allowed(self, length: int, offset: int | None) -> int:
        """How much of the next `length` bytes go out before the link drops (lock held)."""
        srv = self.server
        allowed = length
        if srv.cut_after is not None:
            allowed = max(0, min(allowed, srv.cut_after - srv.stats.body_bytes))
        if offset is not None:
            for point in srv.cut_points:
                if offset <= point < offset + allowed:
                    srv.cut_points.remove(point)
                    allowed = point - offset
                    break
        return allowed

    def _resolve(self) -> Path | None:
        rel = self.path.split("?", 1)[0].lstrip("/")
        for prefix, base in sorted(self.server.mounts.items(), key=lambda m: -len(m[0])):
            if prefix and rel != prefix and not rel.startswith(prefix + "/"):
                continue
            path = (base / rel[len(prefix):].lstrip("/")).resolve()
            if path.is_relative_to(base) and path.is_file():
                return path
            return None
        return None

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the simulation reports totals, not every object fetched."""


class RepoServer(ServedInThread):
    """Serve `root` on `host` (a free port) from a thread while in use.

    `make_server` lets the caller create the listening socket elsewhere, e.g. inside a network
    namespace (see builder.device.netlink.in_netns); the serving thread may run anywhere.
    """

    def __init__(self, root: Path, host: str = "127.0.0.1", port: int = 0, *,
                 latency: float = 0.0, updates: Path | None = None,
                 make_server: Callable[[Callable[[], _RepoHTTPServer]], _RepoHTTPServer]
                 | None = None) -> None:
        if not (root / "config").is_file():
            from builder.core.errors import BuildError
            raise BuildError(f"{root} is not an ostree repository (no config file)")
        # With an updates directory, serve the published layout: /repo/ and /updates/.
        mounts = {"": root} if updates is None else {"repo": root, "updates": updates}
        self.repo_path = "" if updates is None else "repo/"

        def factory() -> _RepoHTTPServer:
            return _RepoHTTPServer(mounts, (host, port))

        httpd = make_server(factory) if make_server else factory()
        httpd.latency = latency
        super().__init__(httpd, name=f"ostree-repo-server:{os.fspath(root)}")
        self._httpd: _RepoHTTPServer = httpd

    @property
    def url(self) -> str:
        """The repository's URL (what a device's ostree remote points at)."""
        return super().url + "/" + self.repo_path

    @property
    def stats(self) -> ServeStats:
        with self._httpd.lock:
            current = self._httpd.stats
            return ServeStats(current.requests, current.body_bytes, current.cut_transfers,
                              list(current.delta_ranges))

    def cut_delta_at(self, offsets: list[int]) -> None:
        """Drop the link once at each offset of a .delta file's bytes as they are served."""
        with self._httpd.lock:
            self._httpd.cut_points = sorted(offsets)

    def misbehave(self, pattern: str, how: str, interval: float = 1.0) -> None:
        """Answer requests whose path matches `pattern` (a regular expression) as a hostile
        server would (BEHAVIOURS)."""
        if how not in BEHAVIOURS:
            raise ValueError(f"{how!r} is not one of {', '.join(BEHAVIOURS)}")
        with self._httpd.lock:
            self._httpd.hostile.append((re.compile(pattern), how))
            self._httpd.hostile_interval = interval

    def drop_link_after(self, nbytes: int | None) -> None:
        """Cut every transfer once `nbytes` of body have been served; None restores the link."""
        with self._httpd.lock:
            served = self._httpd.stats.body_bytes
            self._httpd.cut_after = None if nbytes is None else served + nbytes
