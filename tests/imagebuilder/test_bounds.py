"""A hostile or broken service cannot hold the client: a dribbling answer ends at the
whole-answer deadline, an endless or oversized one at the size bound, each in one line, and
the client's memory stays small (measured in a process of its own)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from builder.core.errors import BuildError
from builder.core.http_thread import ServedInThread
from builder.imagebuilder.bounds import ANSWER_MAX_BYTES
from builder.imagebuilder.client import Endpoint, RetryPolicy, WeldrClient
from tests.support.cli import PROJECT_ROOT

STATUS_BODY = json.dumps({"uuids": []}).encode()


class _Hostile(BaseHTTPRequestHandler):
    mode: ClassVar[str] = "dribble"
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        try:
            if self.mode == "announced":
                self.send_header("Content-Length", str(256 * 1024 * 1024))
                self.end_headers()
                self.wfile.write(b"{" * 1024)
            elif self.mode == "dribble":
                self.send_header("Content-Length", str(len(STATUS_BODY)))
                self.end_headers()
                for byte in STATUS_BODY:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.4)
            else:  # endless: chunked, as fast as it goes, never a last chunk
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                chunk = b" " * 65536
                while True:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_POST(self) -> None:
        """A 200 that is no Weldr acknowledgement (a proxy's page, another service)."""
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = b'{"result": "stored"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def url() -> Any:
    with ServedInThread(ThreadingHTTPServer(("127.0.0.1", 0), _Hostile), "hostile") as served:
        yield served.url


def _client(url: str, timeout: float) -> WeldrClient:
    return WeldrClient(Endpoint(socket=None, url=url), timeout=timeout,
                       retry=RetryPolicy(attempts=1, base_delay=0), sleep=lambda _s: None)


@pytest.mark.parametrize(("mode", "words"), [
    ("dribble", "no answer from"),
    ("endless", f"goes on past {ANSWER_MAX_BYTES} bytes"),
    ("announced", "announces a 268435456-byte answer"),
])
def test_each_answer_ends_within_its_deadline_in_one_line(url: str, mode: str,
                                                          words: str) -> None:
    _Hostile.mode = mode
    client = _client(url, 2.0)
    started = time.monotonic()
    with pytest.raises(BuildError) as caught:
        client.status("0a1b2c3d-0000-4000-8000-00000000abcd")
    assert time.monotonic() - started < 4.0
    assert words in caught.value.message and "\n" not in caught.value.message
    client.close()


# VmHWM, not ru_maxrss: Linux carries the parent's peak into ru_maxrss across fork and exec
# (a pytest worker of 500 MB made a 40 MB probe look like 509 MB); VmHWM is the peak of this
# process's own memory since exec.
PROBE = """
import sys
from builder.imagebuilder.client import Endpoint, RetryPolicy, WeldrClient
from builder.core.errors import BuildError
client = WeldrClient(Endpoint(socket=None, url=sys.argv[1]), timeout=30,
                     retry=RetryPolicy(attempts=1, base_delay=0))
try:
    client.status("0a1b2c3d-0000-4000-8000-00000000abcd")
except BuildError as exc:
    print(exc.message, file=sys.stderr)
status = open("/proc/self/status").read()
print(int(next(l.split()[1] for l in status.splitlines() if l.startswith("VmHWM:"))) * 1024)
"""


def test_an_endless_answer_costs_little_memory(url: str) -> None:
    _Hostile.mode = "endless"
    proc = subprocess.run([sys.executable, "-c", PROBE, url], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=60, check=True)
    assert "goes on past" in proc.stderr
    assert int(proc.stdout.strip()) < 200 * 1024 * 1024


def test_a_push_answered_with_something_else_is_named_as_such(url: str) -> None:
    client = _client(url, 2.0)
    with pytest.raises(BuildError) as caught:
        client.push_blueprint('name = "img"\nversion = "1.0.0"\n')
    assert caught.value.message == ("composer: push the blueprint: the service's answer is "
                                    "not a Weldr acknowledgement ({\"status\": true}): "
                                    "'{\"result\": \"stored\"}'")
    client.close()
