"""A stand-in MicroShift API for the device simulation, answering from a health model.

The simulated device runs the real greenboot check scripts; where they ask the MicroShift API
(`GET /readyz`, `GET /apis/apps/v1/namespaces/NS/{deployments,daemonsets,statefulsets}/NAME`)
this local HTTP server answers as a MicroShift in the scenario's state would: healthy, API never
ready, one workload crash-looping, or everything ready only some seconds after start.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from builder.core.errors import InputError
from builder.core.http_thread import ServedInThread

WORKLOAD_PATH = re.compile(
    r"^/apis/apps/v1/namespaces/(?P<ns>[^/]+)/(?P<kind>deployment|daemonset|statefulset)s/"
    r"(?P<name>[^/?]+)$")
KINDS = {"deployment": "Deployment", "daemonset": "DaemonSet", "statefulset": "StatefulSet"}


@dataclass(frozen=True)
class Health:
    """How MicroShift behaves during one boot, measured from the moment it starts.

    ready_after: seconds until the API and the workloads are ready; None = never.
    crashloop: workloads ("namespace/name") whose pods never become ready.
    failing: health endpoints ("/readyz", "/livez") that keep failing while everything
    else is ready: an API server stuck unready, or ready but restarting (not live).
    """

    ready_after: float | None = 0.0
    crashloop: frozenset[str] = field(default_factory=frozenset)
    service_active: bool = True
    failing: frozenset[str] = field(default_factory=frozenset)

    def describe(self) -> str:
        if not self.service_active:
            return "microshift.service fails to start"
        if self.ready_after is None:
            return "the API server never becomes ready"
        if self.crashloop:
            return f"pods of {', '.join(sorted(self.crashloop))} crash-loop"
        if self.failing:
            return f"{', '.join(sorted(self.failing))} keep failing"
        if self.ready_after > 0:
            return f"ready {self.ready_after:g}s after start"
        return "healthy"


HEALTH_CHOICES = "healthy, api-never-ready, service-failed, crashloop:NAMESPACE/NAME, slow:SECONDS"


def parse_health(text: str, where: str = "--health") -> Health:
    """`healthy`, `api-never-ready`, `service-failed`, `crashloop:NS/NAME`, `slow:SECONDS`."""
    kind, _, arg = text.partition(":")
    if kind == "healthy" and not arg:
        return Health()
    if kind == "api-never-ready" and not arg:
        return Health(ready_after=None)
    if kind == "service-failed" and not arg:
        return Health(service_active=False)
    if kind == "crashloop" and re.fullmatch(r"[a-z0-9.-]+/[a-z0-9.-]+", arg):
        return Health(crashloop=frozenset({arg}))
    if kind == "slow":
        try:
            seconds = float(arg)
        except ValueError:
            seconds = -1.0
        if seconds >= 0:
            return Health(ready_after=seconds)
    raise InputError(where, "", f"unknown health model {text!r}", hint=f"use {HEALTH_CHOICES}")


class ApiState:
    """What the API answers: the current boot's health model and the installed workloads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._health = Health(ready_after=None)
        self._started = time.monotonic()
        self._workloads: frozenset[tuple[str, str, str]] = frozenset()
        self.requests = 0

    def microshift_started(self, health: Health,
                           workloads: frozenset[tuple[str, str, str]]) -> None:
        """A boot started MicroShift with `workloads` (namespace, kind, name) installed."""
        with self._lock:
            self._health = health
            self._started = time.monotonic()
            self._workloads = workloads

    def ready(self) -> bool:
        with self._lock:
            health, started = self._health, self._started
        if not health.service_active or health.ready_after is None:
            return False
        return time.monotonic() - started >= health.ready_after

    def endpoint_ok(self, path: str) -> bool:
        with self._lock:
            failing = path in self._health.failing
        return self.ready() and not failing

    def count_request(self) -> None:
        with self._lock:
            self.requests += 1

    def workload(self, ns: str, kind: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            if (ns, kind, name) not in self._workloads:
                return None
            crashing = f"{ns}/{name}" in self._health.crashloop
        return workload_object(ns, kind, name, ready=self.ready() and not crashing)


def workload_object(ns: str, kind: str, name: str, *, ready: bool) -> dict[str, Any]:
    """The parts of an apps/v1 object the check reads; zero counts are omitted, as the API does."""
    meta = {"name": name, "namespace": ns}
    if kind == "daemonset":
        status: dict[str, int] = {"currentNumberScheduled": 1, "desiredNumberScheduled": 1}
        status.update({"numberReady": 1, "numberAvailable": 1} if ready
                      else {"numberUnavailable": 1})
        return {"apiVersion": "apps/v1", "kind": KINDS[kind], "metadata": meta, "status": status}
    status = {"replicas": 1, "updatedReplicas": 1}
    status.update({"readyReplicas": 1, "availableReplicas": 1} if ready
                  else {"unavailableReplicas": 1})
    return {"apiVersion": "apps/v1", "kind": KINDS[kind], "metadata": meta,
            "spec": {"replicas": 1}, "status": status}


class _Handler(BaseHTTPRequestHandler):
    server: _ApiHTTPServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        state = self.server.state
        state.count_request()
        path = self.path.split("?", 1)[0]
        if path in ("/readyz", "/livez", "/healthz"):
            if state.endpoint_ok(path):
                self._send(200, "text/plain", b"ok")
            else:
                self._send(500, "text/plain",
                           b"[+]ping ok\n[-]etcd failed: reason withheld\nreadyz check failed")
            return
        match = WORKLOAD_PATH.match(path)
        if match is None:
            self._status(404, "NotFound", f"the server could not find {path}")
        elif not state.ready():
            self._status(503, "ServiceUnavailable", "the API server is not ready")
        else:
            obj = state.workload(match["ns"], match["kind"], match["name"])
            if obj is None:
                self._status(404, "NotFound",
                             f'{match["kind"]}s.apps "{match["name"]}" not found')
            else:
                self._send(200, "application/json", json.dumps(obj).encode())

    def _status(self, code: int, reason: str, message: str) -> None:
        body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                "message": message, "code": code}
        self._send(code, "application/json", json.dumps(body).encode())

    def _send(self, code: int, content_type: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the simulation reports what the checks saw, not every request."""


class _ApiHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: ApiState) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state


class ApiServer(ServedInThread):
    """The stand-in API on 127.0.0.1 (a free port), served from a thread while in use."""

    def __init__(self) -> None:
        self.state = ApiState()
        super().__init__(_ApiHTTPServer(self.state), name="microshift-api-standin")
