"""The agents a run started die with it, even when the run is killed with SIGKILL.

gpg-agent forks itself away from whoever started it (`--daemon` always forks, so a parent-
death signal set before exec is lost), and a run killed with SIGKILL runs no `finally`. So
every run starts a reaper first: `python -m builder.core.reaper`, in its own session,
reading the run's GnuPG homes from a pipe whose other end only the run holds. When the run
ends, however it ends, the kernel closes that end, the reaper reads end-of-file and stops
the agents the run left, by the same rules as the run's own last step
(`children.stop_gpg_agents`), then exits. A run that ends normally has stopped them already
and waits for its reaper to find nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from builder.core import children
from builder.core.runner import Runner

WAIT = 10.0  # seconds a finished run waits for its reaper (two agents' 2 s grace, and more)
# A gpg the killed run had started is not killed with it and may start an agent a moment
# after the run died (bench signals: 2 of 20 SIGKILLs of `composer compose`, while signing):
# the reaper looks again for this long before it exits.
LINGER = 2.0
ENDED = b"\0ended\n"  # the run's last word when it ends by itself (not a path: NUL)


class Reaper:
    """The run's side: the pipe's write end, and the reaper's process."""

    def __init__(self, build_dir: Path | None, given_homes: Iterable[Path],
                 started: float) -> None:
        read_end, self._write_end = os.pipe()
        settings = json.dumps({"build_dir": str(build_dir) if build_dir else None,
                               "given": [str(home) for home in given_homes],
                               "started": started})
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "builder.core.reaper", settings], stdin=read_end,
                stdout=subprocess.DEVNULL, start_new_session=True,
                env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        finally:
            os.close(read_end)
        os.set_inheritable(self._write_end, False)
        children.watch_made_homes(self.home_made)
        for home in children.made_gnupg_homes():
            self.home_made(home)

    def home_made(self, home: Path) -> None:
        with contextlib.suppress(OSError):  # a reaper that is gone cannot be told
            os.write(self._write_end, os.fsencode(home) + b"\n")

    def close(self) -> None:
        """End the pipe and wait for the reaper's last look."""
        children.unwatch_made_homes(self.home_made)
        with contextlib.suppress(OSError):
            os.write(self._write_end, ENDED)  # not killed: its children are done, no lingering
        with contextlib.suppress(OSError):
            os.close(self._write_end)
        try:
            self.process.wait(WAIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def reap(settings: dict[str, object], lines: Iterable[bytes]) -> list[children.Agent]:
    """Wait for the run's end (the end of `lines`), then stop what it left."""
    received = [line.rstrip(b"\n") for line in lines if line.strip()]
    ended = ENDED.rstrip(b"\n") in received
    made = {Path(os.fsdecode(line)) for line in received if b"\0" not in line}
    build_dir = settings.get("build_dir")
    given = settings.get("given") or []
    started = settings.get("started")
    assert isinstance(given, list) and isinstance(started, (int, float))
    build = Path(str(build_dir)) if build_dir else None
    homes = [Path(str(home)) for home in given]
    runner = Runner()
    stopped: list[children.Agent] = []
    deadline = time.monotonic() + (0 if ended else LINGER)
    while True:
        stopped += children.stop_gpg_agents(runner, build, homes, float(started), made=made)
        if time.monotonic() >= deadline:
            return stopped
        time.sleep(0.25)


def main(argv: list[str]) -> int:
    reap(json.loads(argv[0]), sys.stdin.buffer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
