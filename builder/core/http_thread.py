"""A local HTTP server served from a daemon thread for the length of a `with` block.

Also part of the device's microshift-update zip application (its pull relay): Python 3.9."""

from __future__ import annotations

import threading
from http.server import HTTPServer
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Self


class ServedInThread:
    """Owns `httpd`: starts serving on enter, shuts down and closes the socket on exit."""

    def __init__(self, httpd: HTTPServer, name: str) -> None:
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, daemon=True, name=name)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
