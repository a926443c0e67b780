"""Verdicts: what a device tells the admin about a rollout, signed with its own key.

On first use the updater makes an Ed25519 key with openssl (the Python 3.9 standard library
has no signatures): /var/lib/microshift-update/device-key.pem, mode 0600, never leaving the
device. Each verdict is a JSON payload, signed as bytes (no canonical form to get wrong):

    {"format": VERDICT_FORMAT, "payload": BASE64, "signature": BASE64, "public_key": PEM}
    payload: {"machine_id", "seq", "time", "ref", "rollout", "commit", "wave", "event",
              "from_commit", "from_version", "version", "boots", "failed_check", "labels"}

`event` is offered (its wave is open: it starts), downloaded, staged, then green or
rolled-back once greenboot has judged the new release. `seq` grows with every verdict the
device makes, which is how the collector tells a replay from a new verdict.

Verdicts wait in the outbox (/var/lib/microshift-update/outbox/, one file each, written by
rename) until a POST to `collector_url` answers: 2xx (recorded) or 4xx (refused: sending
it again cannot help) removes the file; 5xx or no answer keeps it for the next run. A site
without a link leaves the files for `python -m builder rollout collect` (a USB stick).
Making or sending a verdict never stops an update: a failure is logged and the run goes on.

Device side: Python 3.9, standard library only (and the openssl tool).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from builder.core.errors import BuildError
from builder.core.runner import Runner
from builder.updater.fetch import Patience, request
from builder.updater.state import write_atomic

VERDICT_FORMAT = "microshift-edge-builder/rollout-verdict/v1"
EVENTS = ("offered", "downloaded", "staged", "green", "rolled-back")
FINAL = ("green", "rolled-back")
KEY = "device-key.pem"
SEQ = "verdict-seq"
OUTBOX = "outbox"
MAX_VERDICT = 16 * 1024   # the collector refuses bodies over this


class DeviceKey:
    """The device's signing key in the updater's state directory, made on first use."""

    def __init__(self, state: Path, runner: Runner) -> None:
        self.path = state / KEY
        self.runner = runner

    def ensure(self) -> None:
        if self.path.is_file():
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(KEY + ".new")
        tmp.unlink(missing_ok=True)
        old = os.umask(0o077)
        try:
            self.runner.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(tmp)])
        finally:
            os.umask(old)
        os.replace(tmp, self.path)

    def public_pem(self) -> str:
        self.ensure()
        return self.runner.output(["openssl", "pkey", "-in", str(self.path), "-pubout"])

    def sign(self, data: bytes) -> bytes:
        self.ensure()
        scratch = self.path.with_name("verdict.payload")
        scratch.write_bytes(data)
        try:
            proc = self.runner.run(["openssl", "pkeyutl", "-sign", "-rawin", "-inkey",
                                    str(self.path), "-in", str(scratch)])
        finally:
            scratch.unlink(missing_ok=True)
        return proc.stdout


def envelope(key: DeviceKey, payload: dict[str, Any]) -> bytes:
    data = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return json.dumps({"format": VERDICT_FORMAT,
                       "payload": base64.b64encode(data).decode(),
                       "signature": base64.b64encode(key.sign(data)).decode(),
                       "public_key": key.public_pem()}, sort_keys=True).encode()


class Outbox:
    """Signed verdicts not yet accepted by the collector, oldest first."""

    def __init__(self, state: Path, key: DeviceKey) -> None:
        self.state = state
        self.dir = state / OUTBOX
        self.key = key

    def next_seq(self) -> int:
        path = self.state / SEQ
        try:
            seq = int(path.read_text().strip()) + 1
        except (OSError, ValueError):
            # A lost counter restarts from the clock: still above any seq sent before.
            seq = int(time.time() * 1000)
        write_atomic(path, f"{seq}\n")
        return seq

    def add(self, payload: dict[str, Any]) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        seq = self.next_seq()
        body = envelope(self.key, {**payload, "seq": seq, "time": int(time.time())})
        path = self.dir / f"{seq:016d}-{payload['event']}.json"
        write_atomic(path, body)
        return path

    def pending(self) -> list[Path]:
        return sorted(self.dir.glob("*.json")) if self.dir.is_dir() else []

    def send(self, url: str, patience: Patience, log: Callable[[str], None]) -> int:
        """POST the pending verdicts in order; the number the collector took."""
        sent = 0
        for path in self.pending():
            code = post(url, path.read_bytes(), patience)
            if code is None or code >= 500:
                log(f"collector {url} did not take {path.name} "
                    f"({'no answer' if code is None else f'HTTP {code}'}): kept for the next run")
                break
            if code >= 400:
                log(f"collector {url} refused {path.name} (HTTP {code}): dropped")
            else:
                sent += 1
            path.unlink()
        return sent


def post(url: str, body: bytes, patience: Patience) -> int | None:
    """The collector's HTTP status for one verdict; None when it gave no (whole) answer."""
    try:
        with request(url, patience, method="POST", body=body,
                     headers={"Content-Type": "application/json"}) as response:
            response.read_all(MAX_VERDICT)
            return int(response.status)
    except (OSError, http.client.HTTPException):
        return None


def report(outbox: Outbox, payload: dict[str, Any], log: Callable[[str], None]) -> None:
    """Queue a verdict; a device that cannot sign (no openssl, a full /var) still updates."""
    try:
        path = outbox.add(payload)
    except (BuildError, OSError) as exc:
        log(f"verdict {payload.get('event')} not made: {str(exc).splitlines()[0]}")
        return
    log(f"verdict {payload['event']} for rollout {payload['rollout']} queued ({path.name})")
