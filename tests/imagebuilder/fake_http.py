"""The HTTP side of the fake Weldr service: servers, httprouter-like routing, replies.

Follows osbuild/osbuild-composer internal/weldr/api.go: ServeHTTP sets
"Content-Type: application/json; charset=utf-8" on every answer, statusResponseError writes
{"status": false, "errors": [...]}, notFoundHandler answers unknown routes (and API versions
other than 0 and 1, verifyRequestVersion) with a JSON 404 HTTPError, and httprouter answers a
known path with another method 405 with no body (methodNotAllowedHandler). Compose ids are
parsed as google/uuid Parse does.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import socketserver
import sys
import threading
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

HEX = "0123456789abcdefABCDEF"
Reply = tuple[int, str, bytes, dict[str, str]]
JSON_TYPE = "application/json; charset=utf-8"


def parse_uuid(text: str) -> str | None:
    """google/uuid Parse: plain, {braced}, urn:uuid: or 32 hex digits, any case."""
    if len(text) == 45 and text[:9].lower() == "urn:uuid:":
        text = text[9:]
    elif len(text) == 38 and text[0] == "{" and text[-1] == "}":
        text = text[1:-1]
    if len(text) == 36:
        if any(text[i] != "-" for i in (8, 13, 18, 23)):
            return None
        digits = text.replace("-", "")
    elif len(text) == 32:
        digits = text
    else:
        return None
    if len(digits) != 32 or any(c not in HEX for c in digits):
        return None
    return str(uuidlib.UUID(digits))  # lower-case, dashed: uuid.UUID.String()


def ok(body: Any) -> Reply:
    return 200, JSON_TYPE, json.dumps(body).encode(), {}


def error(code: int, err_id: str, msg: str, *, with_code: bool = False) -> Reply:
    """statusResponseError: {"status": false, "errors": [{"id", "msg"}]} ("code" if set)."""
    item: dict[str, Any] = {"id": err_id, "msg": msg}
    if with_code:
        item = {"code": code, **item}
    return code, JSON_TYPE, json.dumps({"status": False, "errors": [item]}).encode(), {}


def not_found() -> Reply:
    """api.go notFoundHandler: a JSON body, also for unknown routes and API versions."""
    return error(404, "HTTPError", "Not Found", with_code=True)


@dataclass(frozen=True)
class Request:
    method: str
    route: str          # the path after /api/vN/, e.g. "compose/status/UUID"
    param: str          # the :param or *param part
    query: dict[str, list[str]]
    content_type: str | None
    body: bytes


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    content_type: str
    body: bytes


Handler = Callable[[Request], Reply]


class FakeServer:
    """Routes requests to `self.routes` and serves them on unix sockets and/or TCP."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Handler] = {}
        self.requests: list[Recorded] = []
        self.faults: dict[str, list[int]] = {}
        self.lock = threading.RLock()
        self._servers: list[socketserver.BaseServer] = []

    # -- lifecycle --------------------------------------------------------------------------

    def serve_unix(self, path: Path) -> Path:
        self._start(_UnixServer(str(path), _handler_for(self)))
        return path

    def serve_tcp(self) -> str:
        server = _TcpServer(("127.0.0.1", 0), _handler_for(self))
        self._start(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    def _start(self, server: socketserver.BaseServer) -> None:
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        self._servers.append(server)

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def paths(self, method: str | None = None) -> list[str]:
        return [r.path for r in self.requests if method is None or r.method == method]

    # -- routing (httprouter as set up in api.go setupRouter) -------------------------------

    def route(self, method: str, path: str, ctype: str | None, body: bytes,
              query: str = "") -> Reply:
        match = re.fullmatch(r"/api/v([^/]*)/(.*)", path)
        if match is None:
            return not_found()
        rest = match.group(2)
        matched = [(key, param) for key in self.routes
                   if (param := _match(key[1], rest)) is not None]
        handler = next((self.routes[key] for key, _ in matched if key[0] == method), None)
        if handler is None:
            # httprouter: 405 with no body when only another method has the route
            return (405, JSON_TYPE, b"", {}) if matched else not_found()
        # verifyRequestVersion: API versions 0 and 1 exist, anything else is a JSON 404.
        if match.group(1) not in ("0", "1"):
            return not_found()
        param = next(param for key, param in matched if key[0] == method)
        request = Request(method, rest, param, parse_qs(query), ctype, body)
        return handler(request)

    def take_fault(self, method: str, path: str) -> int | None:
        with self.lock:
            for key, codes in self.faults.items():
                want_method, _, prefix = key.partition(" ")
                if method == want_method and path.startswith(prefix) and codes:
                    return codes.pop(0)
        return None


def _match(pattern: str, rest: str) -> str | None:
    """httprouter matching for one route: ':' is one non-empty segment, '*' the rest."""
    if pattern.endswith("/*"):
        base = pattern[:-2]
        return rest[len(base):] if rest.startswith(base + "/") else None
    if pattern.endswith("/:"):
        base = pattern[:-2]
        tail = rest[len(base) + 1:] if rest.startswith(base + "/") else ""
        return tail if tail and "/" not in tail else None
    return "" if rest == pattern else None


class _QuietOnHangUp(socketserver.BaseServer):
    """A client that hangs up mid-answer (a killed or timed-out client: what the bounds and
    signal tests do on purpose) is not a fault of the service; anything else is reported."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class _UnixServer(socketserver.ThreadingMixIn, _QuietOnHangUp, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False


class _TcpServer(_QuietOnHangUp, ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False


def _handler_for(fake: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep pytest output clean; requests are in fake.requests

        def address_string(self) -> str:
            return "unix" if isinstance(self.client_address, str) else str(self.client_address)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length", "0") or 0)
            body = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            ctype = self.headers.get("Content-Type")
            fake.requests.append(Recorded(method, parts.path, ctype or "", body))
            fault = fake.take_fault(method, parts.path)
            if fault == 0:
                # Drop the connection without an answer: what a restarting service looks like.
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            headers: dict[str, str] = {}
            if fault is not None:
                code, ctype_out, payload, headers = error(fault, "HTTPError",
                                                          f"fault {fault} injected")
                if fault in (502, 503, 504):
                    ctype_out, payload = "text/html", b"<html>Service Unavailable</html>"
            else:
                try:
                    code, ctype_out, payload, headers = fake.route(method, parts.path, ctype,
                                                                   body, parts.query)
                except Exception as exc:  # a bug in the fake must not look like a dropped link
                    code, ctype_out, payload, headers = error(500, "InternalError",
                                                              f"fake: {exc!r}")
            self.send_response(code)
            self.send_header("Content-Type", ctype_out)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            # The client may have given up already (timeout tests).
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(payload)

    return Handler
