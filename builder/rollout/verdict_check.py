"""Checking a verdict a device sent (builder/updater/verdicts.py) before it counts.

Each refusal has a reason, counted by the store, and an HTTP status for the device:
malformed (400; 413 over the size limit; also a key the crypto library cannot use, or JSON
nested deeper than a verdict is, read by the one bounded reader, builder/core/bounded_json.py),
forged (the signature does not verify with the key it came with), foreign-device (signed by
another key than the one pinned for that machine id), foreign-labels (other labels than
the ones pinned for it: 403), unknown-device (not enrolled, when the collector takes
enrolled devices only: 403), replayed (a verdict the collector never recorded whose sequence
number is not above the device's last: one withheld and sent later; 409), unknown-rollout
(no published rollout of that id and commit: 409), wave-not-open and wrong-wave (a claim on
a wave that has not opened, or that the device's place and labels do not put it in: 409;
never counted, so never a halt), too-many (over the per-device limit of verdicts for one
rollout: 429). A verdict identical to one already recorded (a device resending after an
answer it did not get, or anyone replaying it) is answered 200, changes nothing, and is
counted as a duplicate. A verdict may say the device is held (`held`: a reason and since
when, builder/updater/fleet.py); one without it (an older updater's) is not held.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from builder.core.bounded_json import BadDocument, Doc, parse
from builder.updater.index import CHECKSUM
from builder.updater.outcome import MAX_LOG
from builder.updater.rollout_rules import LABEL_RE
from builder.updater.verdicts import EVENTS, MAX_VERDICT, VERDICT_FORMAT
from builder.updater.waves import ID_RE, Rollout, wave_of

STATUS = {"malformed": 400, "too-large": 413, "forged": 403, "foreign-device": 403,
          "foreign-labels": 403, "unknown-device": 403, "replayed": 409,
          "unknown-rollout": 409, "wave-not-open": 409, "wrong-wave": 409, "too-many": 429}
MACHINE_ID = 64   # characters at most (systemd's are 32 hex digits)
DEPTH = 3         # an envelope is flat; a payload holds one object (labels)
MAX_LABELS = 32
MAX_HELD = 512    # characters of a hold's reason


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
    labels: tuple[tuple[str, str], ...]   # the device's labels, as it reports them
    public_key: str       # PEM, as sent
    digest: str           # sha256 of the whole body: what makes a resend identical
    held_reason: str = ""  # why a run of the device held, while it waits ("": it does not)
    held_since: int = 0    # when that hold began (device clock, seconds)
    failed_log: str = ""   # the failed check's last lines, for a rolled-back verdict

    def label_map(self) -> dict[str, str]:
        return dict(self.labels)


def check(body: bytes) -> Verdict:
    """The verdict in a body, signed by the key it carries; Refused otherwise. Pinning,
    replays, waves and rollouts are the store's to judge (it holds the state)."""
    if len(body) > MAX_VERDICT:
        raise Refused("too-large", f"{len(body)} bytes, over {MAX_VERDICT}")
    try:
        envelope = Doc(parse(body, "verdict", limit=MAX_VERDICT, depth=DEPTH), "verdict")
        envelope.equals("format", VERDICT_FORMAT, VERDICT_FORMAT)
        payload_bytes = _base64(envelope, "payload")
        signature = _base64(envelope, "signature")
        pem = envelope.text("public_key", max_length=8192)
        payload = parse(payload_bytes, "verdict payload", limit=MAX_VERDICT, depth=DEPTH)
    except BadDocument as exc:
        raise Refused("malformed", str(exc)) from None
    key = public_key_of(pem)
    try:
        key.verify(signature, payload_bytes)
    except InvalidSignature as exc:
        raise Refused("forged", "the signature does not verify with the key sent") from exc
    return _verdict(payload, pem, hashlib.sha256(body).hexdigest())


def _base64(envelope: Doc, key: str) -> bytes:
    text = envelope.text(key, max_length=MAX_VERDICT, allowed="base64 text")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise envelope.fail(key, "is not base64 text") from None


def public_key_of(pem: str) -> Ed25519PublicKey:
    """The Ed25519 key in `pem`; Refused for anything else, including what the crypto
    library cannot load at all (an EC key on a curve it does not support, explicit curve
    parameters, DSA, ...)."""
    try:
        key = load_pem_public_key(pem.encode())
    except (ValueError, TypeError, UnicodeError, UnsupportedAlgorithm) as exc:
        reason = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise Refused("malformed", f"public_key is not a PEM public key this collector "
                                   f"can use ({reason})") from None
    if not isinstance(key, Ed25519PublicKey):
        kind = type(key).__name__.removesuffix("PublicKey")
        raise Refused("malformed", f"public_key is an {kind} key; allowed: an Ed25519 key")
    return key


def _verdict(payload: Any, pem: str, digest: str) -> Verdict:
    if not isinstance(payload, dict):
        raise Refused("malformed", "the payload is not an object")
    fields: dict[str, Any] = {name: payload.get(name) for name in Verdict.__dataclass_fields__
                              if name not in ("public_key", "digest", "labels", "held_reason",
                                              "held_since", "failed_log")}
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
    reason, since = _held(payload.get("held"))
    log = payload.get("failed_log", "")   # none from a device of an older updater
    if not isinstance(log, str) or len(log) > MAX_LOG or \
            not all(line.isprintable() for line in log.split("\n")):
        raise Refused("malformed", f"failed_log is not lines of printable text, at most "
                                   f"{MAX_LOG} characters")
    return Verdict(public_key=pem, digest=digest, labels=_labels(payload.get("labels")),
                   held_reason=reason, held_since=since, failed_log=log, **fields)


def _held(value: Any) -> tuple[str, int]:
    """The hold a verdict reports (none from a device of an older updater, or one that
    is not held): its reason, at most MAX_HELD characters, and when it began."""
    if value is None:
        return "", 0
    if not isinstance(value, dict) or set(value) != {"reason", "since"} or \
            not _text(value["reason"], MAX_HELD) or not value["reason"] or \
            not isinstance(value["since"], int) or isinstance(value["since"], bool) or \
            not 0 <= value["since"] < 2 ** 62:
        raise Refused("malformed", f"held is not {{\"reason\": text of at most {MAX_HELD} "
                                   "characters, \"since\": seconds}")
    return value["reason"], value["since"]


def _labels(value: Any) -> tuple[tuple[str, str], ...]:
    """The labels a device reports (none from a device of an older updater)."""
    if value is None:
        return ()
    if not isinstance(value, dict) or len(value) > MAX_LABELS or not all(
            isinstance(k, str) and isinstance(v, str) and LABEL_RE.match(k) and
            LABEL_RE.match(v) for k, v in value.items()):
        raise Refused("malformed", f"labels is not a map of at most {MAX_LABELS} label names "
                                   "to values")
    return tuple(sorted(value.items()))


def check_wave(rollout: Rollout, verdict: Verdict) -> None:
    """A verdict speaks for the device's own wave, once that wave is open: a device cannot
    halt a rollout through a wave it is not in, or one nobody was offered yet."""
    number = verdict.wave
    if not 0 <= number < len(rollout.waves):
        raise Refused("wrong-wave", f"rollout {rollout.id} has no wave {number + 1}")
    wave = rollout.waves[number]
    if wave.opened is None and rollout.state != "complete":
        raise Refused("wave-not-open", f"wave {number + 1} ({wave.name}) of rollout "
                                       f"{rollout.id} is not open")
    own = wave_of(rollout, verdict.machine_id, verdict.label_map())
    if own != number:
        raise Refused("wrong-wave", f"{verdict.machine_id} is in wave {own + 1} "
                                    f"({rollout.waves[own].name}) by its place and labels, "
                                    f"not in wave {number + 1}")


def _text(value: Any, most: int = 256) -> bool:
    """A string SQLite can store: at most `most` characters, no lone surrogate."""
    if not isinstance(value, str) or len(value) > most:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
