"""Bounds on what the service may send: a whole answer within a deadline and a size.

`--timeout` alone bounds each read; a service that sends one byte every few seconds, or
an endless or oversized answer, would hold the client (and the build directory's lock) and
its memory without end. Weldr answers are kilobytes; images are streamed to disk instead
(client.download_image, with their own size limit).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

import requests

from builder.core.errors import BuildError

ANSWER_MAX_BYTES = 16 * 1024 * 1024
IMAGE_MAX_BYTES = 64 * 1024 ** 3  # an installer ISO is a few GiB; a commit tarball less


class AnswerDeadline(Exception):
    """The whole answer did not come in time (raised from SIGALRM)."""


@contextlib.contextmanager
def answer_deadline(seconds: float) -> Iterator[None]:
    """Bound the whole answer, not each read: a service that sends a byte every few seconds
    never trips a read timeout. SIGALRM interrupts a blocked read in the main thread (where
    the CLI runs); elsewhere only the per-read timeout holds."""
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum: int, frame: object) -> None:
        raise AnswerDeadline

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def read_bounded(resp: requests.Response, what: str) -> None:
    """Read the body into the response, refusing one over ANSWER_MAX_BYTES (a Weldr answer
    is kilobytes: a bigger one is not a Weldr answer, and must not fill the memory)."""
    declared = resp.headers.get("Content-Length", "").strip()
    if declared.isdigit() and int(declared) > ANSWER_MAX_BYTES:
        resp.close()
        raise BuildError(f"composer: {what}: the service announces a {declared}-byte answer, "
                         f"over the {ANSWER_MAX_BYTES} a Weldr answer may have")
    body = bytearray()
    try:
        for chunk in resp.iter_content(64 * 1024):
            body += chunk
            if len(body) > ANSWER_MAX_BYTES:
                raise BuildError(f"composer: {what}: the answer goes on past "
                                 f"{ANSWER_MAX_BYTES} bytes: not a Weldr answer")
    finally:
        resp.close()
    resp._content = bytes(body)  # what resp.json() and resp.text read
