"""One delta file, downloaded with HTTP range requests into a staging directory that survives
reboots, resumed from its last byte after a cut, capped in bandwidth, checked by size and
sha256 before anything applies it.

    STAGING/FROM-TO.delta.part    the bytes so far (fsynced at every cut and every 4 MiB)
    STAGING/download.json         what the part is of: file, commits, size, sha256

A part is only resumed when download.json names the same file with the same size and
sha256 (the index may have changed between two runs); otherwise it is discarded.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import BinaryIO

from builder.core.bounded_json import BadDocument, parse
from builder.core.errors import BuildError
from builder.updater.fetch import DeadlineReached, Patience, Response, check_deadline, request
from builder.updater.index import DeltaFile, UpdateRefused
from builder.updater.state import write_atomic

CHUNK = 64 * 1024
SYNC_EVERY = 4 * 1024 * 1024
STATE = "download.json"
CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


@dataclass(frozen=True)
class Limits:
    bytes_per_second: int = 0   # 0: no cap
    retries: int = 10
    retry_delay: float = 30.0
    patience: Patience = field(default_factory=Patience)  # timeout, low speed, deadline


@dataclass
class Transfer:
    """What one download did, for the log and the report."""

    resumed_from: int = 0       # bytes already staged when this run began
    received: int = 0           # body bytes received by this run
    requests: int = 0
    interruptions: int = 0      # cuts survived (each resumed from the last byte)
    restarts: int = 0           # the server ignored Range: bytes received again from 0


class Download:
    def __init__(self, staging: Path, url: str, delta: DeltaFile, limits: Limits,
                 report: Callable[[int, int], None], *,
                 vouched_by: str = "the signed index") -> None:
        self.staging = staging
        self.vouched_by = vouched_by   # what names the file's size and sha256
        self.url = url
        self.delta = delta
        self.limits = limits
        self.report = report  # (bytes staged, bytes total): progress for the status file
        self.part = staging / (delta.file + ".part")
        self.transfer = Transfer()
        self._complete: bool | None = None   # complete()'s answer, once asked

    def run(self) -> Path:
        """The complete, verified file (renamed from .part); raises after the retries."""
        if self.complete():
            self.transfer.resumed_from = self.delta.size
            self.report(self.delta.size, self.delta.size)
            return self.staging / self.delta.file
        self._prepare()
        attempt = 0
        patience = self.limits.patience
        while True:
            have = self.part.stat().st_size
            if have >= self.delta.size:
                break
            check_deadline(patience, f"downloading {self.delta.file} ({have} of "
                                     f"{self.delta.size} bytes staged)")
            try:
                self._get(have)
            except DeadlineReached as exc:
                staged = self.part.stat().st_size
                raise DeadlineReached(f"{exc.message}; {staged} of {self.delta.size} bytes "
                                      "staged", hint=exc.hint) from None
            except (OSError, http.client.HTTPException) as exc:
                attempt += 1
                self.transfer.interruptions += 1
                staged = self.part.stat().st_size
                if attempt > self.limits.retries:
                    raise BuildError(f"download of {self.delta.file} cut {attempt} times, "
                                     f"{staged} of {self.delta.size} bytes staged: {exc}",
                                     hint="the next run resumes from the last byte") from exc
                delay = min(self.limits.retry_delay * attempt, 600.0)
                left = patience.remaining()
                time.sleep(max(0.0, min(delay, left)) if left is not None else delay)
        return self._verified()

    def complete(self) -> bool:
        """Whether a previous run left the whole file (verified, then held by the apply
        window): it is not downloaded again. A whole-sized file that does not verify is
        removed, so the caller's decision (wait for the download window or not) and run()
        agree. Checked once: the file is hashed at most once per Download."""
        if self._complete is None:
            final = self.staging / self.delta.file
            whole = final.is_file() and final.stat().st_size == self.delta.size
            self._complete = whole and _sha256(final) == self.delta.sha256
            if whole and not self._complete:
                final.unlink()
        return self._complete

    def _prepare(self) -> None:
        self.staging.mkdir(parents=True, exist_ok=True)
        state = self.staging / STATE
        # The file's identity, not its URL: a mirror may move and the bytes stay the same.
        wanted = asdict(self.delta)
        try:
            # A damaged record only costs the bytes staged: the part is fetched again.
            same = parse(state.read_bytes(), STATE, limit=64 * 1024) == wanted
        except (OSError, BadDocument):
            same = False
        if not same or not self.part.is_file() or self.part.stat().st_size > self.delta.size:
            for leftover in self.staging.iterdir():
                if leftover.is_file():
                    leftover.unlink()
            self.part.write_bytes(b"")
            write_atomic(state, json.dumps(wanted, sort_keys=True) + "\n")
        self.transfer.resumed_from = self.part.stat().st_size
        self.report(self.transfer.resumed_from, self.delta.size)

    def _get(self, offset: int) -> None:
        if self.url.startswith("file://"):
            # A USB stick: the same resumable copy, read from where the part ends.
            path = Path(urllib.request.url2pathname(self.url[len("file://"):]))
            self.transfer.requests += 1
            with path.open("rb") as local:
                local.seek(offset)
                self._copy(local, offset)
            return
        self.transfer.requests += 1
        with request(self.url, self.limits.patience,
                     headers={"Range": f"bytes={offset}-"}) as response:
            if response.status == 200 and offset:
                # The server ignored Range: take the whole body again from the start
                # (_copy truncates the part at the offset it writes from).
                self.transfer.restarts += 1
                offset = 0
            elif response.status == 206:
                self._check_range(response.header("Content-Range") or "", offset)
            elif response.status >= 500:
                # An overloaded or restarting server: a cut, tried again after a while.
                raise ConnectionError(f"GET {self.url}: HTTP {response.status}")
            elif response.status != 200:
                # 404, 403, ...: asking again cannot help; the index names a file the
                # server does not give.
                raise UpdateRefused(f"GET {self.url}: HTTP {response.status} "
                                    f"{response.reason}".rstrip(),
                                    hint="the file the signed index names is not served; "
                                         "the next run asks again")
            self._copy(response, offset)

    def _check_range(self, header: str, offset: int) -> None:
        match = CONTENT_RANGE.match(header.strip())
        if match is None or int(match.group(1)) != offset or \
                match.group(3) not in ("*", str(self.delta.size)):
            raise UpdateRefused(f"GET {self.url}: Content-Range {header!r} does not continue "
                                f"byte {offset} of a {self.delta.size}-byte file")

    def _copy(self, response: Response | BinaryIO, offset: int) -> None:
        cap = self.limits.bytes_per_second
        chunk = min(CHUNK, max(1024, cap // 20)) if cap else CHUNK
        started, sent = time.monotonic(), 0
        unsynced = 0
        with self.part.open("r+b") as out:
            out.seek(offset)
            out.truncate()
            try:
                while True:
                    # Never past the next sync point: the part is fsynced every 4 MiB.
                    data = response.read(min(chunk, SYNC_EVERY - unsynced))
                    if not data:
                        break
                    if offset + len(data) > self.delta.size:
                        raise UpdateRefused(f"GET {self.url}: more than the index's "
                                            f"{self.delta.size} bytes")
                    out.write(data)
                    offset += len(data)
                    sent += len(data)
                    unsynced += len(data)
                    self.transfer.received += len(data)
                    if unsynced >= SYNC_EVERY:
                        _sync(out)
                        unsynced = 0
                        self.report(offset, self.delta.size)
                    if cap:  # a token bucket: never ahead of cap bytes per second
                        ahead = sent / cap - (time.monotonic() - started)
                        if ahead > 0:
                            time.sleep(ahead)
            finally:
                _sync(out)
                self.report(offset, self.delta.size)
        if offset < self.delta.size:
            raise ConnectionError(f"connection closed after byte {offset}")

    def _verified(self) -> Path:
        size = self.part.stat().st_size
        digest = _sha256(self.part)
        if size != self.delta.size or digest != self.delta.sha256:
            self.part.unlink()
            raise UpdateRefused(f"{self.delta.file}: {size} bytes with sha256 "
                                f"{digest[:16]}..., {self.vouched_by} says "
                                f"{self.delta.size} bytes with {self.delta.sha256[:16]}...",
                                hint="the staged copy was removed; the next run downloads "
                                     "it again")
        final = self.staging / self.delta.file
        os.replace(self.part, final)
        return final


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1024 * 1024), b""):
            digest.update(block)
    return digest.hexdigest()


def _sync(handle: object) -> None:
    handle.flush()  # type: ignore[attr-defined]
    os.fsync(handle.fileno())  # type: ignore[attr-defined]
