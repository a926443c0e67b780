"""Deadlines for the collector's connections, which aiohttp does not have: a client that
sends its request headers a byte at a time (slowloris), or never reads its answer, would
hold a connection, and enough of them the collector.

Each connection serves one request (the collector answers with `Connection: close`) and
lives by two deadlines, counted from the moment it connects: complete request headers
within `header_seconds`, and the connection gone within `lifetime_seconds`. The handler
bounds the body itself (builder/rollout/collector.py). A dropped client is one log line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

HEADER_END = b"\r\n\r\n"


class Guarded(asyncio.Protocol):
    """Wraps aiohttp's protocol for one connection; passes everything through."""

    def __init__(self, inner: asyncio.Protocol, header_seconds: float,
                 lifetime_seconds: float, log: Callable[[str], None]) -> None:
        self.inner = inner
        self.header_seconds = header_seconds
        self.lifetime_seconds = lifetime_seconds
        self.log = log
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.tail = b""
        self.headers_done = False
        self.timers: list[asyncio.TimerHandle] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        loop = asyncio.get_running_loop()
        self.timers = [
            loop.call_later(self.header_seconds, self._drop_without_headers),
            loop.call_later(self.lifetime_seconds, self._drop,
                            f"still connected after {self.lifetime_seconds:g} s"),
        ]
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self.headers_done:
            window = self.tail + data
            if HEADER_END in window:
                self.headers_done = True
                self.timers[0].cancel()
            self.tail = window[-(len(HEADER_END) - 1):]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in self.timers:
            timer.cancel()
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def _drop_without_headers(self) -> None:
        if not self.headers_done:
            self._drop(f"no complete request headers within {self.header_seconds:g} s")

    def _drop(self, why: str) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.log(f"dropped a slow client {self.peer}: {why}")
            self.transport.abort()


def guarded(factory: Callable[[], Any], header_seconds: float, lifetime_seconds: float,
            log: Callable[[str], None]) -> Callable[[], Guarded]:
    """A protocol factory for loop.create_server: aiohttp's, guarded."""
    return lambda: Guarded(factory(), header_seconds, lifetime_seconds, log)
