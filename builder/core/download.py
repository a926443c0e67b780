"""Downloads that must have a known sha256: a payload of release.yaml, an RPM of a URL
repository. The file appears under its name only complete and verified; a failed or
mismatching download leaves nothing behind."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

TIMEOUT = 60        # seconds without a byte from the server before giving up
CHUNK = 1 << 20     # streamed: a real payload is ~100 MB and never held in memory


class DownloadFailed(Exception):
    """The server could not be reached or did not answer with the file (the reason as
    requests says it)."""


class DigestMismatch(Exception):
    def __init__(self, actual: str) -> None:
        super().__init__(f"sha256 {actual}")
        self.actual = actual


def fetch_verified(url: str, sha256: str, dest: Path, *, timeout: float = TIMEOUT) -> int:
    """Download `url` to `dest` if its content has `sha256`; return its size in bytes.

    The bytes go to a hidden temporary file beside `dest` (so the rename stays on one file
    system) and are hashed as they arrive."""
    import requests  # only downloads need it; keeps no-op builds fast

    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=".download-", dir=dest.parent)
    tmp = Path(name)
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as handle, \
                requests.get(url, stream=True, timeout=timeout) as response:
            response.raise_for_status()
            for chunk in response.iter_content(CHUNK):
                handle.write(chunk)
                digest.update(chunk)
            size = handle.tell()
        if digest.hexdigest() != sha256:
            raise DigestMismatch(digest.hexdigest())
        os.replace(tmp, dest)
        return size
    except requests.RequestException as exc:
        raise DownloadFailed(str(exc)) from exc
    finally:
        tmp.unlink(missing_ok=True)
