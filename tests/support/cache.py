"""Slow test inputs made once: a directory a builder function writes, kept under build/ (which
git ignores) and keyed by the content of what made it, then copied to each test session that
asks for it.

The key is a digest of the builder's name and arguments, the source text of tests/support/
(the builder, and what it calls there) and the versions of the tools it runs: change any of
them and the directory is made again (entries of older sources are removed then); `rm -rf
build/test-cache` is always safe. Tests only ever get a copy, so nothing a test does (or a
mutant of the code under test) can change what the next session starts from. Two processes
building the same entry at once each build a draft and rename it into place; the second
rename fails, and that process uses the first one's entry (the same content).
"""

from __future__ import annotations

import functools
import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from builder.core.paths import PROJECT_ROOT

CACHE = PROJECT_ROOT / "build" / "test-cache"


@functools.cache
def tool_versions(*tools: str) -> str:
    return "".join(subprocess.run([tool, "--version"], check=True, capture_output=True,
                                  text=True).stdout for tool in tools)


def _digest(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def sources_digest() -> str:
    """What the builders are: the source text of tests/support/."""
    return _digest(*(source.read_text() for source in sorted(Path(__file__).parent.glob("*.py"))))


def cached_copy(dest: Path, build: Callable[..., None], *inputs: str,
                tools: tuple[str, ...] = ("ostree",), cache: Path = CACHE) -> Path:
    """`build(DIR, *inputs)`'s output, made once per key, copied to `dest` (made here).

    Entries live in CACHE/SOURCES/NAME-KEY; the first entry made for new sources removes the
    entries of every other SOURCES (older builders), so edits leave no stale copies behind."""
    sources = sources_digest()
    generation = cache / sources
    key = _digest(f"{build.__module__}.{build.__qualname__}", *inputs, *tools,
                  tool_versions(*tools))
    entry = generation / f"{build.__name__.strip('_')}-{key}"
    if not entry.is_dir():
        if not generation.is_dir() and cache.is_dir():
            for other in cache.iterdir():
                if other.name != sources:  # another process may be filling this one
                    shutil.rmtree(other, ignore_errors=True)
        generation.mkdir(parents=True, exist_ok=True)
        draft = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=generation))
        try:
            build(draft, *inputs)
            try:
                draft.rename(entry)
            except OSError:
                if not entry.is_dir():
                    raise
        finally:
            shutil.rmtree(draft, ignore_errors=True)
    shutil.copytree(entry, dest, symlinks=True)
    return dest
