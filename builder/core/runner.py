"""The one seam through which every external tool runs.

It logs the command, captures stderr, and raises ToolError on failure. Unit tests
replace a Runner instance (never a module global) to fake tool behaviour.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from builder.core.errors import MissingToolError, ToolError

log = logging.getLogger("builder.run")

# System tools the builder runs (semodule, losetup, vgs, ...) live here, and Debian leaves
# them off an unprivileged user's PATH although they work for one (`semodule -p ROOT`).
SBIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def search_path(path: str | None = None) -> str:
    """`path` (default: $PATH), followed by the sbin directories it lacks."""
    parts = (os.environ.get("PATH", os.defpath) if path is None else path).split(os.pathsep)
    return os.pathsep.join([*parts, *(d for d in SBIN_DIRS if d not in parts)])


def find_tool(name: str) -> str | None:
    return shutil.which(name, path=search_path())


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
        full_env = self._env(args[0], env)
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
        resident set size), so heavy tools can be reported and budgeted.

        The command is started by a small Python launcher and measured with wait4 there:
        Linux carries the peak of the memory image a process had before exec over into its
        ru_maxrss, so a command forked straight from this (possibly large) process would
        report at least this process's own peak."""
        args = [os.fspath(a) for a in argv]
        full_env = self._env(args[0], None)
        log.debug("run (measured): %s", " ".join(args))
        read_end, write_end = os.pipe()
        try:
            with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
                started = time.monotonic()
                child = subprocess.Popen(
                    [sys.executable, "-S", "-c", MEASURE_LAUNCHER, str(write_end), *args],
                    stdout=out, stderr=err, stdin=subprocess.DEVNULL, pass_fds=(write_end,),
                    env=full_env)
                os.close(write_end)
                write_end = -1
                returncode = child.wait()
                seconds = time.monotonic() - started
                peak_kib = os.read(read_end, 64).decode() or "0"
                out.seek(0)
                err.seek(0)
                proc = subprocess.CompletedProcess(args, returncode, out.read(), err.read())
        finally:
            os.close(read_end)
            if write_end >= 0:
                os.close(write_end)
        if check and proc.returncode != 0:
            raise ToolError(args, proc.returncode, proc.stderr.decode(errors="replace"))
        return Measured(proc, seconds, int(peak_kib) * 1024)

    def _env(self, program: str, extra: Mapping[str, str] | None) -> dict[str, str]:
        """The command's environment; raises MissingToolError when its PATH (with the sbin
        directories) has no `program`."""
        env = {**os.environ, **self.env, **(extra or {})}
        env["PATH"] = search_path(env.get("PATH", os.defpath))
        if shutil.which(program, path=env["PATH"]) is None and not os.path.exists(program):
            raise MissingToolError(program)
        return env

    def output(self, argv: Sequence[str | os.PathLike[str]], **kwargs: object) -> str:
        """Run and return stdout as text."""
        return self.run(argv, **kwargs).stdout.decode()  # type: ignore[arg-type]


# argv: FD COMMAND...; runs COMMAND, writes its ru_maxrss (KiB) to FD, exits with its status.
MEASURE_LAUNCHER = """import os, sys
fd, argv = int(sys.argv[1]), sys.argv[2:]
pid = os.fork()
if pid == 0:
    try:
        os.execvp(argv[0], argv)
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
os.write(fd, str(usage.ru_maxrss).encode())
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


@dataclass(frozen=True)
class Measured:
    proc: subprocess.CompletedProcess[bytes]
    seconds: float
    peak_rss: int  # bytes


def require_tools(*tools: str) -> None:
    for tool in tools:
        if find_tool(tool) is None:
            raise MissingToolError(tool)
