"""The update index's freshness: a signed statement that the index is the current one.

Beside each ref's index, `deltas --gpg-key` and `publish --gpg-key` write

    updates/REF/timestamp.json      {format, ref, index_sha256, issued, expires}
    updates/REF/timestamp.json.sig  a detached GPG signature of timestamp.json

The index stays byte-reproducible (its signature time is the release's); this small file is
signed with the wall clock, as TUF's timestamp role is, and `publish` signs it again with a
fresh date every time it runs. Without it, a mirror or a man in the middle could serve an old,
correctly signed index (or summary) forever and keep a device on an old release without a
word: a freeze attack. A device refuses a statement that does not verify, names another ref
or another index, has expired, or was issued before one it has already accepted (a replay);
it stays on its commit and `microshift-update status` says why.

Device clocks: a device whose clock is behind accepts an expired statement for as long as it
is behind (it cannot know better); one whose clock is ahead refuses a valid one until the
next publish. The validity (default 7 days) is the release engineer's trade between the two.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.core.bounded_json import BadDocument, Doc
from builder.updater.index import CHECKSUM, UpdateRefused, load_document
from builder.updater.state import read_json, write_atomic
from builder.updater.waves import Rollout, parse_rollout

TIMESTAMP = "timestamp.json"
TIMESTAMP_SIGNATURE = "timestamp.json.sig"
TIMESTAMP_FORMAT = "microshift-edge-builder/index-timestamp/v1"
DEFAULT_VALIDITY_SECONDS = 7 * 24 * 3600
ACCEPTED = "accepted-index.json"   # in the updater's state directory: ref -> newest statement


@dataclass(frozen=True)
class Timestamp:
    ref: str
    index_sha256: str
    issued: int
    expires: int
    rollout: Rollout | None = None   # builder/updater/waves.py; None: every device at once

    def to_json(self) -> str:
        document: dict[str, Any] = {"format": TIMESTAMP_FORMAT, "ref": self.ref,
                                    "index_sha256": self.index_sha256, "issued": self.issued,
                                    "expires": self.expires}
        if self.rollout is not None:
            document["rollout"] = self.rollout.to_dict()
        return json.dumps(document, indent=2, sort_keys=True) + "\n"


def timestamp_for(ref: str, index: bytes, validity_seconds: int,
                  now: float | None = None, rollout: Rollout | None = None) -> Timestamp:
    issued = int(time.time() if now is None else now)
    return Timestamp(ref, hashlib.sha256(index).hexdigest(), issued, issued + validity_seconds,
                     rollout)


def parse_timestamp(data: bytes, what: str) -> Timestamp:
    doc = load_document(data, TIMESTAMP_FORMAT, what)
    try:
        ref = doc.text("ref", max_length=1024)
        digest = doc.text("index_sha256", pattern=CHECKSUM, allowed="a sha256 (64 hex digits)")
        issued = doc.integer("issued", 0, 2 ** 40 - 1)
        expires = doc.integer("expires", 0, 2 ** 40 - 1)
        rollout = doc.child("rollout", required=False)
    except BadDocument as exc:
        raise UpdateRefused(str(exc)) from None
    if expires <= issued:
        raise UpdateRefused(f"{what}: expires is not after issued")
    return Timestamp(ref, digest, issued, expires,
                     None if rollout is None else parse_rollout(rollout.data, what))


def check_fresh(stamp: Timestamp, ref: str, index: bytes, *, accepted: Timestamp | None,
                now: float, what: str) -> None:
    """Refuse a statement for another ref or index, an expired one, or a replayed one."""
    hint = ("the device keeps its commit; `publish --gpg-key ...` signs a fresh statement, "
            "or the server is not serving what was published")
    if stamp.ref != ref:
        raise UpdateRefused(f"{what}: names ref {stamp.ref!r}, the device tracks {ref!r}",
                            hint=hint)
    if stamp.index_sha256 != hashlib.sha256(index).hexdigest():
        raise UpdateRefused(f"{what}: names another index than the one served (index.json "
                            "changed without a new statement, or an old index is replayed)",
                            hint=hint)
    if now >= stamp.expires:
        raise UpdateRefused(f"{what}: expired at {date_text(stamp.expires)} (issued "
                            f"{date_text(stamp.issued)}): a stale or replayed index", hint=hint)
    if accepted is not None and (stamp.issued < accepted.issued or (
            stamp.issued == accepted.issued and stamp.index_sha256 != accepted.index_sha256)):
        raise UpdateRefused(f"{what}: issued {date_text(stamp.issued)}, before the statement "
                            f"this device accepted on {date_text(accepted.issued)}: a replayed "
                            "index", hint=hint)


def date_text(seconds: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


class AcceptedFile:
    """The newest statement the device accepted, per ref: what a replay is measured by.
    Damaged, it stops the updater (builder/updater/state.py): read as empty, a replayed
    older statement would be accepted."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read_all(self) -> dict[str, Timestamp]:
        data = read_json(self.path, _accepted_document)
        return {} if data is None else _accepted_document(data)

    def get(self, ref: str) -> Timestamp | None:
        return self.read_all().get(ref)

    def put(self, stamp: Timestamp) -> None:
        entries = {ref: {"index_sha256": old.index_sha256, "issued": old.issued,
                         "expires": old.expires} for ref, old in self.read_all().items()}
        entries[stamp.ref] = {"index_sha256": stamp.index_sha256, "issued": stamp.issued,
                              "expires": stamp.expires}
        write_atomic(self.path, json.dumps(entries, indent=2, sort_keys=True) + "\n")


def _accepted_document(data: Any) -> dict[str, Timestamp]:
    top = Doc(data, ACCEPTED)
    found: dict[str, Timestamp] = {}
    for ref in top.data:
        entry = top.child(ref)
        assert entry is not None
        found[ref] = Timestamp(ref, entry.text("index_sha256", pattern=CHECKSUM),
                               entry.integer("issued", 0, 2 ** 40),
                               entry.integer("expires", 0, 2 ** 40))
    return found
