"""A read-only container registry on 127.0.0.1: the pull side of the distribution API
(`/v2/`, manifests and blobs by digest) serving OCI layout directories over plain HTTP, so
the registry path of image resolution and embedding runs skopeo for real without a network.
skopeo reaches it with `--tls-verify=false` (it falls back to HTTP then)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROUTE = re.compile(r"^/v2/(?P<repo>.+)/(?P<kind>manifests|blobs)/(?P<ref>sha256:[0-9a-f]{64})$")


class _Handler(BaseHTTPRequestHandler):
    def __init__(self, *args: Any, layouts: Mapping[str, Path], **kwargs: Any) -> None:
        self.layouts = layouts
        super().__init__(*args, **kwargs)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # skopeo's requests are not the test's output

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        if self.path == "/v2/":
            self._send(200, b"{}", "application/json", body)
            return
        match = ROUTE.match(self.path)
        layout = self.layouts.get(match.group("repo")) if match else None
        blob = layout / "blobs" / match.group("ref").replace(":", "/") if layout and match \
            else None
        if match is None or blob is None or not blob.is_file():
            self._send(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"unknown"}]}',
                       "application/json", body)
            return
        data = blob.read_bytes()
        media_type = "application/octet-stream"
        if match.group("kind") == "manifests":
            media_type = json.loads(data).get("mediaType", media_type)
        self._send(200, data, media_type, body, digest=match.group("ref"))

    def _send(self, status: int, data: bytes, media_type: str, body: bool,
              digest: str | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", media_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        if digest:
            self.send_header("Docker-Content-Digest", digest)
        self.end_headers()
        if body:
            self.wfile.write(data)


@contextmanager
def registry(layouts: Mapping[str, Path]) -> Iterator[str]:
    """Serve each OCI layout directory as repository NAME; yield the registry's host:port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Handler, layouts=layouts))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
