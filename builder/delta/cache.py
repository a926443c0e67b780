"""Parts made once: a bounded cache of delta parts, keyed by what decides their bytes.

DIR/cache/delta-parts/KK/KEY.part holds a part file, KEY.json its sha256, size and the
uncompressed size its header needs (written last: an entry without it is not there). KEY
is the part plan's identity (builder/delta/layout.py: its objects, the bsdiff sources and
the encoder settings), so every path, profile, release and run that needs the same part
takes it from here; deltas hard-link it. A CI job that restores DIR/cache starts warm.

An entry is checked when it is taken (size and sha256 against its record) and dropped when
damaged. The cache keeps within its limit by dropping the entries used longest ago (an
entry's time is touched on use); a delta that links a dropped part keeps its own link.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from builder.core.files import write_atomic

DEFAULT_LIMIT = 8 << 30
PART, RECORD = ".part", ".json"


@dataclass(frozen=True)
class CachedPart:
    path: Path
    sha256: str
    bytes: int
    uncompressed: int


class PartCache:
    def __init__(self, root: Path, limit: int = DEFAULT_LIMIT) -> None:
        self.root = root
        self.limit = limit

    def _paths(self, key: str) -> tuple[Path, Path]:
        base = self.root / key[:2] / key
        return base.with_suffix(PART), base.with_suffix(RECORD)

    def get(self, key: str) -> CachedPart | None:
        part, record = self._paths(key)
        try:
            found = json.loads(record.read_text())
            cached = CachedPart(part, str(found["sha256"]), int(found["bytes"]),
                                int(found["uncompressed"]))
            with part.open("rb") as handle:
                digest = hashlib.file_digest(handle, "sha256").hexdigest()
        except (OSError, ValueError, KeyError, TypeError):
            self._drop(key)
            return None
        if digest != cached.sha256 or part.stat().st_size != cached.bytes:
            self._drop(key)
            return None
        for path in (part, record):
            with contextlib.suppress(OSError):
                os.utime(path)
        return cached

    def put(self, key: str, data: bytes, uncompressed: int) -> CachedPart:
        part, record = self._paths(key)
        write_atomic(part, data)
        cached = CachedPart(part, hashlib.sha256(data).hexdigest(), len(data), uncompressed)
        write_atomic(record, json.dumps({"sha256": cached.sha256, "bytes": cached.bytes,
                                         "uncompressed": uncompressed}) + "\n")
        return cached

    def _drop(self, key: str) -> None:
        for path in self._paths(key):
            path.unlink(missing_ok=True)

    def trim(self) -> tuple[int, int]:
        """Drop the entries used longest ago until the cache is within its limit;
        (entries dropped, bytes freed)."""
        entries = []
        for record in self.root.glob(f"*/*{RECORD}"):
            part = record.with_suffix(PART)
            with contextlib.suppress(OSError):
                entries.append((record.stat().st_mtime, part.stat().st_size, record.stem))
        total = sum(size for _, size, _ in entries)
        dropped = freed = 0
        for _, size, key in sorted(entries):
            if total <= self.limit:
                break
            self._drop(key)
            total -= size
            dropped, freed = dropped + 1, freed + size
        return dropped, freed
