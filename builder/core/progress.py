"""Nested, timed progress steps for people (text) and CI (JSON lines)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO


class Progress:
    def __init__(self, *, json_mode: bool = False, stream: TextIO | None = None) -> None:
        self.json_mode = json_mode
        self.stream = stream if stream is not None else sys.stderr
        self._stack: list[str] = []
        self.failed_at: str | None = None  # the innermost step that failed, for errors

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        self._emit("start", name, f"==> {name}")
        self._stack.append(name)
        started = time.monotonic()
        ok = False
        try:
            yield
            ok = True
        finally:
            self._stack.pop()
            elapsed = time.monotonic() - started
            status = "done" if ok else "failed"
            if not ok and self.failed_at is None:
                self.failed_at = name
            self._emit(status, name, f"<== {name} {status} in {elapsed:.2f}s", seconds=elapsed)

    def info(self, message: str, **fields: Any) -> None:
        self._emit("info", self._stack[-1] if self._stack else "", f"    {message}", **fields)

    def skipped(self, what: str, step_id: str) -> None:
        self.info(f"{what}: unchanged (step {step_id[:12]}), not rebuilt", skipped=what, id=step_id)

    def wrote(self, path: str, size: int) -> None:
        self.info(f"wrote {path} ({human_bytes(size)})", path=path, bytes=size)

    def _emit(self, event: str, step: str, text: str, **fields: Any) -> None:
        if self.json_mode:
            record = {"event": event, "step": step, "depth": len(self._stack),
                      "time": round(time.time(), 3), **fields}
            if event == "info":
                record["message"] = text.strip()
            self.stream.write(json.dumps(record, sort_keys=True) + "\n")
        else:
            self.stream.write("  " * len(self._stack) + text + "\n")
        self.stream.flush()


def human_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
