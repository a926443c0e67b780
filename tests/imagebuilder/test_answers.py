"""Whatever osbuild-composer (or a proxy in front of it) answers, the client ends in a result
or in the project's typed error: malformed JSON, wrong types, truncated bodies, odd status
codes and headers, an image shorter than its Content-Length."""

from __future__ import annotations

import json
import tempfile
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from builder.core.errors import BuildError
from builder.core.http_thread import ServedInThread
from builder.core.progress import Progress
from builder.imagebuilder.client import Endpoint, RetryPolicy, WeldrClient
from tests.support.mutations import mutated

UUID = "0a1b2c3d-0000-4000-8000-00000000abcd"
ANSWERS: dict[str, Any] = {
    "compose_types": {"types": [{"name": "edge-commit", "enabled": True}]},
    "blueprint_info": {"blueprints": [{"name": "img", "version": "4.14.2"}], "changes": [],
                       "errors": []},
    "depsolve": {"blueprints": [{"blueprint": {"name": "img", "version": "4.14.2"},
                                 "dependencies": [{"name": "a", "epoch": 0, "version": "1",
                                                   "release": "1", "arch": "x86_64"}]}],
                 "errors": []},
    "start_compose": {"build_id": UUID, "status": True, "warnings": ["w"]},
    "status": {"uuids": [{"id": UUID, "blueprint": "img", "version": "4.14.2",
                          "compose_type": "edge-commit", "queue_status": "FINISHED",
                          "image_size": 10}]},
}
CALLS: dict[str, Any] = {
    "compose_types": lambda c: c.compose_types(),
    "blueprint_info": lambda c: c.blueprint_info("img"),
    "depsolve": lambda c: c.depsolve("img"),
    "start_compose": lambda c: c.start_compose({"blueprint_name": "img",
                                                "compose_type": "edge-commit"}),
    "status": lambda c: c.status(UUID),
}


class _Answer(BaseHTTPRequestHandler):
    answer: ClassVar[dict[str, Any]] = {}

    def _reply(self) -> None:
        status, headers, body = (self.answer[k] for k in ("status", "headers", "body"))
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = _reply

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def client() -> Any:
    httpd = HTTPServer(("127.0.0.1", 0), _Answer)
    with ServedInThread(httpd, "weldr-answers") as served:
        weldr = WeldrClient(Endpoint(socket=None, url=served.url), timeout=5,
                            retry=RetryPolicy(attempts=2, base_delay=0), sleep=lambda _s: None)
        yield weldr
        weldr.close()


def _bodies(route: str) -> st.SearchStrategy[bytes]:
    valid = ANSWERS[route]
    text = json.dumps(valid).encode()
    return st.one_of(
        mutated(valid).map(lambda doc: json.dumps(doc, default=str).encode()),
        st.integers(0, len(text)).map(lambda n: text[:n]),             # truncated
        st.binary(max_size=64),                                         # not JSON at all
        st.sampled_from([b"null", b"[]", b'"text"', b"1e999", b"<html>502</html>"]))


STATUSES = st.sampled_from([200, 200, 200, 201, 204, 301, 400, 404, 409, 500, 502, 503])


@pytest.mark.fuzz
@given(data=st.data(), route=st.sampled_from(sorted(CALLS)))
def test_every_answer_is_a_result_or_a_typed_error(client: WeldrClient, data: st.DataObject,
                                                   route: str) -> None:
    status = data.draw(STATUSES) if route != "status" or data.draw(st.booleans()) else 200
    _Answer.answer = {"status": status, "headers": {"Content-Type": "application/json"},
                      "body": data.draw(_bodies(route))}
    try:
        CALLS[route](client)
    except BuildError as exc:
        assert str(exc).strip(), "an error says what went wrong"


@pytest.mark.fuzz
@given(body=st.binary(max_size=256), length=st.one_of(
    st.none(), st.integers(0, 512).map(str), st.sampled_from(["", "-1", "abc", "1e3", " 7"])))
def test_an_image_download_is_complete_or_a_typed_error_and_nothing_is_left(
        client: WeldrClient, body: bytes, length: str | None) -> None:
    headers = {"Content-Type": "application/x-tar"}
    if length is not None:
        headers["Content-Length"] = length
    _Answer.answer = {"status": 200, "headers": headers, "body": body}
    folder = Path(tempfile.mkdtemp(prefix="download-"))
    dest = folder / "image.tar"
    try:
        written = client.download_image(UUID, dest, Progress(json_mode=True))
    except BuildError:
        assert not dest.exists()
    else:
        assert dest.read_bytes()[:written] == body[:written] and written == dest.stat().st_size
    assert [p.name for p in folder.iterdir()] in ([], ["image.tar"])  # no .part left
