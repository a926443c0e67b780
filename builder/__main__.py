"""`python -m builder` and the `microshift-builder` command.

SIGTERM (a cancelled CI job) is answered from the first moment: loading the CLI's modules
takes about half a second, and the CLI installs its own handler (which unwinds the run) only
once they are loaded; before that, and after the run has put it back, the same line and
status are given here, with nothing started that needs stopping.
"""

import os
import signal
import sys

TERMINATED = b"terminated (SIGTERM): the run stopped; a rerun resumes it\n"


def _terminated(signum: int, frame: object) -> None:
    os.write(2, TERMINATED)
    os._exit(143)


def answer_sigterm() -> None:
    signal.signal(signal.SIGTERM, _terminated)


def run() -> int:
    answer_sigterm()
    try:
        from builder.cli import main
    except ModuleNotFoundError as exc:  # a Python without the project's dependencies
        if (exc.name or "").partition(".")[0] == "builder":
            raise
        print(f"error: {sys.executable} lacks the builder's dependencies (no module named "
              f"{exc.name!r})\nhint: enter the project's environment: `. ci/bootstrap.sh` "
              "(once), then `. .venv/bin/activate` in a new shell", file=sys.stderr)
        return 2
    return main()


if __name__ == "__main__":
    raise SystemExit(run())
