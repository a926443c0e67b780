"""The one seam through which every external tool runs.

It logs the command, captures stderr, and raises ToolError on failure. Unit tests
replace a Runner instance (never a module global) to fake tool behaviour.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from builder.core.errors import MissingToolError, ToolError

log = logging.getLogger("builder.run")


@dataclass
class Runner:
    """Runs external commands. `env` is merged over the process environment."""

    env: Mapping[str, str] = field(default_factory=dict)

    def run(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        input: bytes | None = None,
        capture: bool = True,
        timeout: float | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[bytes]:
        args = [os.fspath(a) for a in argv]
        if shutil.which(args[0]) is None and not os.path.exists(args[0]):
            raise MissingToolError(args[0])
        full_env = {**os.environ, **self.env, **(env or {})}
        log.debug("run: %s%s", " ".join(args), f" (cwd={cwd})" if cwd else "")
        try:
            proc = subprocess.run(
                args,
                cwd=cwd,
                env=full_env,
                input=input,
                stdout=subprocess.PIPE if capture else None,
                stderr=subprocess.PIPE,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ToolError(args, -1, f"timed out after {timeout}s") from exc
        if check and proc.returncode != 0:
            raise ToolError(args, proc.returncode, proc.stderr.decode(errors="replace"))
        return proc

    def measured(self, argv: Sequence[str | os.PathLike[str]], *,
                 check: bool = True) -> Measured:
        """Run, and also return the wall time and the command's peak memory (its maximum
        resident set size, from wait4), so heavy tools can be reported and budgeted."""
        args = [os.fspath(a) for a in argv]
        if shutil.which(args[0]) is None and not os.path.exists(args[0]):
            raise MissingToolError(args[0])
        log.debug("run (measured): %s", " ".join(args))
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            started = time.monotonic()
            child = subprocess.Popen(args, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                     env={**os.environ, **self.env})
            _, status, usage = os.wait4(child.pid, 0)
            child.returncode = os.waitstatus_to_exitcode(status)
            seconds = time.monotonic() - started
            out.seek(0)
            err.seek(0)
            proc = subprocess.CompletedProcess(args, child.returncode, out.read(), err.read())
        if check and proc.returncode != 0:
            raise ToolError(args, proc.returncode, proc.stderr.decode(errors="replace"))
        return Measured(proc, seconds, usage.ru_maxrss * 1024)

    def output(self, argv: Sequence[str | os.PathLike[str]], **kwargs: object) -> str:
        """Run and return stdout as text."""
        return self.run(argv, **kwargs).stdout.decode()  # type: ignore[arg-type]


@dataclass(frozen=True)
class Measured:
    proc: subprocess.CompletedProcess[bytes]
    seconds: float
    peak_rss: int  # bytes


def require_tools(*tools: str) -> None:
    for tool in tools:
        if shutil.which(tool) is None:
            raise MissingToolError(tool)
