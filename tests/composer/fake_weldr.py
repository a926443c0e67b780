"""An in-repo fake of osbuild-composer's Weldr API, for contract tests of builder.composer.remote.

osbuild-composer cannot run here, so this fake answers the endpoints our client uses with the
shapes and status codes of the real service, taken from:

- osbuild/osbuild-composer internal/weldr/api.go: setupRouter (routes), statusResponseError
  (`{"status": false, "errors": [{"id", "msg"}]}`), blueprintsNewHandler (TOML needs
  Content-Type text/x-toml; BlueprintsError 400), blueprintsDepsolveHandler (200 with
  `{"blueprints": [{"blueprint", "dependencies"}], "errors": [...]}`; UnknownBlueprint
  "NAME: blueprint not found", BlueprintsError "NAME: <dnf error>"), composeHandler
  (Content-Type must be application/json else MissingPost; UnknownBlueprint 400;
  ComposeError 400 for an unknown type; DepsolveError 500; reply `{build_id, status,
  warnings}`), composeStatusHandler (`{"uuids": [...]}`, a malformed uuid is UnknownUUID 400,
  an unknown one is just absent), composeImageHandler (UnknownUUID / BuildInWrongState 400,
  Content-Disposition "attachment; filename=<uuid>-<file>"), composeLogHandler (WAITING: 200
  with a BuildInWrongState error body; RUNNING: "Build X is still running."; else the log);
- osbuild/osbuild-composer internal/weldr/compose.go: ComposeEntry (id, blueprint, version,
  compose_type, image_size, queue_status, job_created, job_started, job_finished);
- osbuild/osbuild-composer internal/weldr/api_test.go: a parent without a URL is a 400
  ManifestCreationFailed "... ostree parent ref specified, but no URL to retrieve it";
- osbuild/osbuild stages/org.osbuild.ostree.commit + stages/org.osbuild.tar: the edge-commit
  artifact is `tar -C tree .` of an archive repo at repo/ plus compose.json, whose keys
  (`ref`, `ostree-commit`, ...) come from coreos/rpm-ostree's write_composejson.

The edge-commit tarball is built with the real `ostree` tool, so importing it is tested for real.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import socketserver
import subprocess
import tarfile
import threading
import time
import tomllib
import uuid as uuidlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
COMPOSE_TYPES = {"edge-commit": ("commit.tar", "application/x-tar"),
                 "edge-installer": ("installer.iso", "application/x-iso9660-image"),
                 "edge-container": ("container.tar", "application/x-tar")}
COMMIT_TIMESTAMP = "2024-01-01T00:00:00Z"
FAILED_LOG = "\n".join([
    "Pipeline build: 1d7bcd0b9a0b",
    "Stage org.osbuild.rpm",
    "Installing packages...",
    "error: Failed dependencies:",
    "        microshift-networking-provider conflicts with microshift-networking-bridge",
    "Traceback: stage org.osbuild.rpm failed with exit code 1",
]) + "\n"


@dataclass
class Scenario:
    """How the fake behaves; each test sets what it needs."""

    # Queue states a compose goes through, one per status poll; the last one sticks.
    states: tuple[str, ...] = ("WAITING", "RUNNING", "FINISHED")
    # Depsolve failure text: /blueprints/depsolve answers BlueprintsError, /compose DepsolveError.
    depsolve_error: str | None = None
    # "METHOD /path-prefix" -> HTTP codes to answer first, in order; 0 drops the connection.
    faults: dict[str, list[int]] = field(default_factory=dict)
    # Seconds to stall before answering status requests (timeouts).
    status_delay: float = 0.0
    log: str = FAILED_LOG


@dataclass
class Compose:
    id: str
    blueprint: str
    version: str
    compose_type: str
    ostree: dict[str, str]
    polls: int = 0
    created: float = field(default_factory=time.time)


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    content_type: str
    body: bytes


class FakeWeldr:
    """Serve the fake on a unix socket and/or TCP; `stop()` (or a with-block) shuts it down."""

    def __init__(self, workdir: Path, scenario: Scenario | None = None) -> None:
        self.workdir = workdir
        self.scenario = scenario or Scenario()
        self.blueprints: dict[str, dict[str, Any]] = {}
        self.composes: dict[str, Compose] = {}
        self.requests: list[Recorded] = []
        self.commits: dict[str, str] = {}  # compose uuid -> commit checksum it served
        self.lock = threading.Lock()
        self._servers: list[socketserver.BaseServer] = []

    # -- lifecycle --------------------------------------------------------------------------

    def serve_unix(self, path: Path) -> Path:
        server = _UnixServer(str(path), _handler_for(self))
        self._start(server)
        return path

    def serve_tcp(self) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        server.daemon_threads = True
        server.block_on_close = False
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

    def __enter__(self) -> FakeWeldr:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def paths(self, method: str | None = None) -> list[str]:
        return [r.path for r in self.requests if method is None or r.method == method]

    # -- endpoints (each returns status code, content type, body) ---------------------------

    def route(self, method: str, path: str, ctype: str, body: bytes) -> tuple[int, str, bytes]:
        parts = path.split("/")  # "", "api", "v1", ...
        if len(parts) < 4 or parts[1] != "api" or parts[2] not in ("v0", "v1"):
            return 404, "text/plain", b""
        rest = "/".join(parts[3:])
        if method == "POST" and rest == "blueprints/new":
            return self.blueprints_new(ctype, body)
        if method == "GET" and rest.startswith("blueprints/depsolve/"):
            return self.depsolve(rest.split("/", 2)[2].split(","))
        if method == "POST" and rest == "compose":
            return self.compose(ctype, body)
        for prefix, handler in (("compose/status/", self.status), ("compose/image/", self.image),
                                ("compose/log/", self.log)):
            if method == "GET" and rest.startswith(prefix):
                return handler(rest[len(prefix):])
        return 404, "text/plain", b""

    def blueprints_new(self, ctype: str, body: bytes) -> tuple[int, str, bytes]:
        if not ctype:
            return error(400, "BlueprintsError", "missing Content-Type header")
        if not body:
            return error(400, "BlueprintsError", "Missing blueprint")
        try:
            if ctype == "text/x-toml":
                bp = tomllib.loads(body.decode())
            elif ctype == "application/json":
                bp = json.loads(body)
            else:
                raise ValueError("blueprint must be in json or toml format")
        except ValueError as exc:
            return error(400, "BlueprintsError", "400 Bad Request: The browser (or proxy) sent "
                         f"a request that this server could not understand: {exc}")
        name = bp.get("name", "")
        if not isinstance(name, str) or not re.match(r"^[a-zA-Z0-9._-]+$", name):
            return error(400, "InvalidChars", "Invalid characters in API path")
        bp.setdefault("version", "0.0.0")
        with self.lock:
            self.blueprints[name] = bp
        return ok({"status": True})

    def depsolve(self, names: list[str]) -> tuple[int, str, bytes]:
        entries: list[dict[str, Any]] = []
        errors: list[dict[str, str]] = []
        for name in names:
            bp = self.blueprints.get(name)
            if bp is None:
                errors.append({"id": "UnknownBlueprint", "msg": f"{name}: blueprint not found"})
                continue
            deps = [] if self.scenario.depsolve_error else _dependencies(bp)
            if self.scenario.depsolve_error:
                errors.append({"id": "BlueprintsError",
                               "msg": f"{name}: {self.scenario.depsolve_error}"})
            entries.append({"blueprint": bp, "dependencies": deps})
        return ok({"blueprints": entries, "errors": errors})

    def compose(self, ctype: str, body: bytes) -> tuple[int, str, bytes]:
        if ctype != "application/json":
            return error(400, "MissingPost", "blueprint must be json")
        try:
            req = json.loads(body)
        except ValueError:
            return error(404, "HTTPError", "Not Found")
        problem = self._compose_problem(req)
        if problem is not None:
            return problem
        name, ctype_name = req["blueprint_name"], req["compose_type"]
        bp = self.blueprints[name]
        ostree = {k: str(v) for k, v in (req.get("ostree") or {}).items()}
        compose = Compose(id=str(uuidlib.uuid4()), blueprint=name, version=bp["version"],
                          compose_type=ctype_name, ostree=ostree)
        with self.lock:
            self.composes[compose.id] = compose
        return ok({"build_id": compose.id, "status": True, "warnings": []})

    def _compose_problem(self, req: dict[str, Any]) -> tuple[int, str, bytes] | None:
        """The composeHandler checks, in upstream order."""
        name, ctype_name = req.get("blueprint_name", ""), req.get("compose_type", "")
        if name not in self.blueprints:
            return error(400, "UnknownBlueprint", f"Unknown blueprint name: {name}")
        if ctype_name not in COMPOSE_TYPES:
            return error(400, "ComposeError", f'Failed to get compose type "{ctype_name}": '
                         f"invalid image type: {ctype_name}")
        ostree = req.get("ostree") or {}
        if ostree.get("parent") and not ostree.get("url"):
            return error(400, "ManifestCreationFailed", "failed to initialize osbuild manifest:"
                         " ostree parent ref specified, but no URL to retrieve it")
        if self.scenario.depsolve_error:
            return error(500, "DepsolveError", self.scenario.depsolve_error)
        return None

    def status(self, uuids: str) -> tuple[int, str, bytes]:
        time.sleep(self.scenario.status_delay)
        entries = []
        for uuid in uuids.split(","):
            if not UUID_RE.match(uuid):
                return error(400, "UnknownUUID", f"{uuid} is not a valid build uuid")
            compose = self.composes.get(uuid)
            if compose is None:
                continue  # upstream silently leaves unknown uuids out
            with self.lock:
                compose.polls += 1
            entries.append(self._entry(compose))
        return ok({"uuids": entries})

    def image(self, uuid: str) -> tuple[int, str, bytes]:
        compose, failure = self._lookup(uuid)
        if compose is None:
            return failure
        state = self.state(compose)
        if state != "FINISHED":
            return error(400, "BuildInWrongState", f"Build {uuid} is in wrong state: {state}")
        _, mime = COMPOSE_TYPES[compose.compose_type]
        if compose.compose_type == "edge-commit":
            payload = self._commit_tarball(compose)
        else:
            payload = b"\0" * 32768 + b"CD001 fake installer ISO for " + uuid.encode()
        return 200, mime, payload

    def log(self, uuid: str) -> tuple[int, str, bytes]:
        compose, failure = self._lookup(uuid)
        if compose is None:
            return failure
        state = self.state(compose)
        if state == "WAITING":
            # "weirdly, Lorax returns 200 in this case" (api.go composeLogHandler)
            return error(200, "BuildInWrongState",
                         f"Build {uuid} has not started yet. No logs to view.")
        if state == "RUNNING":
            return 200, "text/plain", f"Build {uuid} is still running.\n".encode()
        return 200, "text/plain", self.scenario.log.encode()

    # -- helpers ----------------------------------------------------------------------------

    def state(self, compose: Compose) -> str:
        states = self.scenario.states
        return states[min(max(compose.polls - 1, 0), len(states) - 1)]

    def _lookup(self, uuid: str) -> tuple[Compose | None, tuple[int, str, bytes]]:
        if not UUID_RE.match(uuid):
            return None, error(400, "UnknownUUID", f"{uuid} is not a valid build uuid")
        compose = self.composes.get(uuid)
        if compose is None:
            return None, error(400, "UnknownUUID", f"Compose {uuid} doesn't exist")
        return compose, (200, "", b"")

    def _entry(self, compose: Compose) -> dict[str, Any]:
        state = self.state(compose)
        entry: dict[str, Any] = {
            "id": compose.id, "blueprint": compose.blueprint, "version": compose.version,
            "compose_type": compose.compose_type, "image_size": 0, "queue_status": state,
            "job_created": compose.created}
        if state != "WAITING":
            entry["job_started"] = compose.created + 1
        if state in ("FINISHED", "FAILED"):
            entry["job_finished"] = compose.created + 2
        return entry

    def _commit_tarball(self, compose: Compose) -> bytes:
        """A real edge-commit: archive repo with one commit on the ref, plus compose.json."""
        tarball = self.workdir / f"{compose.id}-commit.tar"
        if tarball.is_file():  # the same artifact on every download, like the real service
            return tarball.read_bytes()
        ref = compose.ostree.get("ref") or "rhel/9/x86_64/edge"
        tree_root = self.workdir / f"commit-{compose.id}"
        repo, tree = tree_root / "repo", self.workdir / f"tree-{compose.id}"
        repo.mkdir(parents=True)
        (tree / "usr" / "bin").mkdir(parents=True)
        (tree / "usr" / "bin" / "hello").write_text("#!/bin/sh\necho hello from the fake\n")
        (tree / "etc").mkdir()
        (tree / "etc" / "os-release").write_text(f'ID=rhel\nPRETTY_NAME="{compose.blueprint}"\n')
        _run("ostree", "init", "--mode=archive", f"--repo={repo}")
        commit = _run("ostree", f"--repo={repo}", "commit", f"--branch={ref}",
                      f"--timestamp={COMMIT_TIMESTAMP}", f"--subject={compose.blueprint}",
                      f"--add-metadata-string=version={compose.version}",
                      f"--tree=dir={tree}").strip()
        meta = {"ref": ref, "ostree-commit": commit, "ostree-version": compose.version,
                "ostree-timestamp": COMMIT_TIMESTAMP, "rpm-ostree-inputhash": "0" * 64}
        (tree_root / "compose.json").write_text(json.dumps(meta))
        with tarfile.open(tarball, "w") as tar:
            tar.add(tree_root, arcname=".")  # like org.osbuild.tar's `tar -C tree .`
        self.commits[compose.id] = commit
        return tarball.read_bytes()

    def take_fault(self, method: str, path: str) -> int | None:
        with self.lock:
            for key, codes in self.scenario.faults.items():
                want_method, _, prefix = key.partition(" ")
                if method == want_method and path.startswith(prefix) and codes:
                    return codes.pop(0)
        return None


def ok(body: dict[str, Any]) -> tuple[int, str, bytes]:
    return 200, "application/json; charset=utf-8", json.dumps(body).encode()


def error(code: int, err_id: str, msg: str) -> tuple[int, str, bytes]:
    body = {"status": False, "errors": [{"id": err_id, "msg": msg}]}
    return code, "application/json; charset=utf-8", json.dumps(body).encode()


def _dependencies(bp: dict[str, Any]) -> list[dict[str, Any]]:
    deps = []
    for pkg in bp.get("packages", []):
        version = str(pkg.get("version", "1.0")).replace("*", "1.0")
        ver, _, rel = version.partition("-")
        deps.append({"name": pkg["name"], "epoch": 0, "version": ver,
                     "release": rel or "1.el9", "arch": "x86_64"})
    return deps


def _run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False


def _handler_for(fake: FakeWeldr) -> type[BaseHTTPRequestHandler]:
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

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length", "0") or 0)
            body = self.rfile.read(length) if length else b""
            path = urlsplit(self.path).path
            ctype = self.headers.get("Content-Type", "")
            fake.requests.append(Recorded(method, path, ctype, body))
            fault = fake.take_fault(method, path)
            if fault == 0:
                # Drop the connection without an answer: what a restarting service looks like.
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if fault is not None:
                code, ctype_out, payload = error(fault, "HTTPError", f"fault {fault} injected")
                if fault in (502, 503, 504):
                    ctype_out, payload = "text/html", b"<html>Service Unavailable</html>"
            else:
                try:
                    code, ctype_out, payload = fake.route(method, path, ctype, body)
                except Exception as exc:  # a bug in the fake must not look like a dropped link
                    code, ctype_out, payload = error(500, "InternalError", f"fake: {exc!r}")
            self.send_response(code)
            self.send_header("Content-Type", ctype_out)
            if code == 200 and "/compose/image/" in path:
                uuid = path.rsplit("/", 1)[1]
                filename = COMPOSE_TYPES[fake.composes[uuid].compose_type][0]
                self.send_header("Content-Disposition", f"attachment; filename={uuid}-{filename}")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            # The client may have given up already (timeout tests).
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(payload)

    return Handler
