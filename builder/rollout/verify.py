"""Checking a verdict a device sent (builder/updater/verdicts.py) before it counts.

Each refusal has a reason, counted by the store, and an HTTP status for the device:
malformed (400; 413 over the size limit), forged (the signature does not verify with the
key it came with), foreign-device (signed by another key than the one pinned for that
machine id), unknown-device (not enrolled, when the collector takes enrolled devices only:
403), replayed (a verdict the collector never recorded whose sequence number is not above the
device's last: one withheld and sent later; 409), unknown-rollout (no published rollout of
that id and commit: 409). A verdict identical to one already recorded (a device resending
after an answer it did not get, or anyone replaying it) is answered 200, changes nothing,
and is counted as a duplicate.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from builder.updater.index import CHECKSUM
from builder.updater.rollout import ID_RE
from builder.updater.verdicts import EVENTS, MAX_VERDICT, VERDICT_FORMAT

STATUS = {"malformed": 400, "too-large": 413, "forged": 403, "foreign-device": 403,
          "unknown-device": 403, "replayed": 409, "unknown-rollout": 409}
MACHINE_ID = 64   # characters at most (systemd's are 32 hex digits)


class Refused(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail

    @property
    def status(self) -> int:
        return STATUS[self.reason]


@dataclass(frozen=True)
class Verdict:
    machine_id: str
    seq: int
    time: int
    ref: str
    rollout: str
    commit: str
    wave: int
    event: str
    from_commit: str
    from_version: str
    version: str
    boots: int
    failed_check: str
    public_key: str       # PEM, as sent
    digest: str           # sha256 of the whole body: what makes a resend identical


def check(body: bytes) -> Verdict:
    """The verdict in a body, signed by the key it carries; Refused otherwise. Pinning,
    replays and rollouts are the store's to judge (it holds the state)."""
    if len(body) > MAX_VERDICT:
        raise Refused("too-large", f"{len(body)} bytes, over {MAX_VERDICT}")
    try:
        envelope = json.loads(body.decode("utf-8"))
        payload_bytes = base64.b64decode(envelope["payload"], validate=True)
        signature = base64.b64decode(envelope["signature"], validate=True)
        pem = envelope["public_key"]
        payload = json.loads(payload_bytes.decode("utf-8"))
    except (UnicodeError, ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise Refused("malformed", f"not a verdict envelope ({type(exc).__name__})") from exc
    if not isinstance(envelope, dict) or envelope.get("format") != VERDICT_FORMAT \
            or not isinstance(pem, str):
        raise Refused("malformed", f"format is not {VERDICT_FORMAT}")
    key = public_key_of(pem)
    try:
        key.verify(signature, payload_bytes)
    except InvalidSignature as exc:
        raise Refused("forged", "the signature does not verify with the key sent") from exc
    return _verdict(payload, pem, hashlib.sha256(body).hexdigest())


def public_key_of(pem: str) -> Ed25519PublicKey:
    try:
        key = load_pem_public_key(pem.encode())
    except (ValueError, TypeError, UnicodeError) as exc:
        raise Refused("malformed", "public_key is not a PEM public key") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise Refused("malformed", "public_key is not an Ed25519 key")
    return key


def _verdict(payload: Any, pem: str, digest: str) -> Verdict:
    if not isinstance(payload, dict):
        raise Refused("malformed", "the payload is not an object")
    fields: dict[str, Any] = {name: payload.get(name) for name in Verdict.__dataclass_fields__
              if name not in ("public_key", "digest")}
    text = ("machine_id", "ref", "rollout", "commit", "event", "from_commit",
            "from_version", "version", "failed_check")
    numbers = ("seq", "time", "wave", "boots")
    bad = [n for n in text if not _text(fields[n])] + \
          [n for n in numbers if not isinstance(fields[n], int) or isinstance(fields[n], bool)
           or not 0 <= fields[n] < 2 ** 62]
    if bad:
        raise Refused("malformed", f"{bad[0]} is missing or of the wrong type")
    if not 0 < len(fields["machine_id"]) <= MACHINE_ID or not fields["machine_id"].isalnum():
        raise Refused("malformed", "machine_id is not a machine id")
    if fields["event"] not in EVENTS:
        raise Refused("malformed", f"event is not one of {', '.join(EVENTS)}")
    if not ID_RE.match(fields["rollout"]) or not CHECKSUM.match(fields["commit"]):
        raise Refused("malformed", "rollout or commit is not an id")
    if fields["wave"] > 1000 or fields["boots"] > 1000:
        raise Refused("malformed", "wave or boots out of range")
    return Verdict(public_key=pem, digest=digest, **fields)


def _text(value: Any) -> bool:
    """A string SQLite can store: at most 256 characters, no lone surrogate."""
    if not isinstance(value, str) or len(value) > 256:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
