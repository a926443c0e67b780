"""Downloads that must have a known sha256 (payloads, RPMs of URL repositories), over real
HTTP on 127.0.0.1: the file appears only complete and verified, and a 100 MB payload is
streamed, never held in memory."""

from __future__ import annotations

import hashlib
import tracemalloc
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from builder.core.download import DigestMismatch, DownloadFailed, fetch_verified
from builder.core.http_thread import ServedInThread

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
SMALL = b"a payload\n" * 10_000


def big(size: int) -> Iterator[bytes]:
    block = hashlib.sha256(b"big").digest() * (MiB // 32)
    for _ in range(size // MiB):
        yield block


class Server(BaseHTTPRequestHandler):
    """/small: SMALL; /big-N: N MiB; /stall: headers and half the body, then silence;
    anything else 404. Records what each request saw in the destination directory."""

    watch: ClassVar[Path | None] = None
    seen: ClassVar[list[list[str]]] = []

    def do_GET(self) -> None:
        if self.watch is not None:
            self.seen.append(sorted(p.name for p in self.watch.iterdir()))
        if self.path == "/small":
            self._send(len(SMALL), [SMALL])
        elif self.path.startswith("/big-"):
            size = int(self.path.removeprefix("/big-")) * MiB
            self._send(size, big(size))
        elif self.path == "/stall":
            self._send(len(SMALL), [SMALL[:len(SMALL) // 2]])
            self.server.stalled.wait(10)  # type: ignore[attr-defined]
        else:
            self.send_error(404)

    def _send(self, size: int, blocks: Any) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        for block in blocks:
            self.wfile.write(block)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    import threading

    Server.watch, Server.seen = None, []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Server)
    httpd.stalled = threading.Event()  # type: ignore[attr-defined]
    with ServedInThread(httpd, "download-test") as served:
        yield served.url
        httpd.stalled.set()  # type: ignore[attr-defined]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_verified_file_appears_complete_under_its_name(server: str, tmp_path: Path) -> None:
    dest = tmp_path / "cache" / "deep" / "payload"
    Server.watch = tmp_path
    assert fetch_verified(f"{server}/small", sha256(SMALL), dest) == len(SMALL)
    assert dest.read_bytes() == SMALL
    assert list(dest.parent.iterdir()) == [dest]
    # While it downloads, the bytes go to a hidden file beside the final name.
    Server.watch = dest.parent
    again = dest.with_name("again")
    fetch_verified(f"{server}/small", sha256(SMALL), again)
    [during] = Server.seen[1:]
    assert next(name for name in during if name != "payload").startswith(".download-")
    assert sorted(p.name for p in dest.parent.iterdir()) == ["again", "payload"]


def test_other_bytes_are_refused_and_nothing_is_kept(server: str, tmp_path: Path) -> None:
    dest = tmp_path / "payload"
    with pytest.raises(DigestMismatch) as refused:
        fetch_verified(f"{server}/small", "0" * 64, dest)
    assert refused.value.actual == sha256(SMALL) and str(refused.value) == f"sha256 {sha256(SMALL)}"
    assert list(tmp_path.iterdir()) == []


def test_a_file_already_there_is_replaced_only_by_a_verified_one(server: str,
                                                                 tmp_path: Path) -> None:
    dest = tmp_path / "payload"
    dest.write_bytes(b"the previous, good one")
    with pytest.raises(DigestMismatch):
        fetch_verified(f"{server}/small", "0" * 64, dest)
    assert dest.read_bytes() == b"the previous, good one"


def test_http_errors_and_refused_connections_fail_with_the_reason(
        server: str, closed_port_url: str, tmp_path: Path) -> None:
    with pytest.raises(DownloadFailed) as missing:
        fetch_verified(f"{server}/gone", "0" * 64, tmp_path / "payload")
    assert str(missing.value).startswith(f"404 Client Error: Not Found for url: {server}/gone")
    with pytest.raises(DownloadFailed) as refused:
        fetch_verified(f"{closed_port_url}/payload", "0" * 64, tmp_path / "payload")
    assert "Connection refused" in str(refused.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", ["", "/stall"])
def test_a_server_that_stops_sending_times_out(path: str, server: str, silent_server: str,
                                               tmp_path: Path) -> None:
    url = f"{server}{path}" if path else f"{silent_server}/payload"
    with pytest.raises(DownloadFailed) as stopped:
        fetch_verified(url, sha256(SMALL), tmp_path / "payload", timeout=0.5)
    assert "timed out" in str(stopped.value)
    assert list(tmp_path.iterdir()) == []


def test_a_large_download_is_streamed_not_held_in_memory(server: str, tmp_path: Path) -> None:
    size = 64
    digest = hashlib.sha256(b"".join(big(size * MiB))).hexdigest()
    tracemalloc.start()
    try:
        fetch_verified(f"{server}/big-{size}", digest, tmp_path / "large")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (tmp_path / "large").stat().st_size == size * MiB
    assert peak < 8 * MiB, peak  # about one chunk of 1 MiB at a time
