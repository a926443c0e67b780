"""microshift-update: bring the device to the newest commit of its ref, over a poor link.

`microshift-update run` (microshift-update.service, started by its timer):
1. reads /etc/microshift/update.yaml (a bad value: exit 2, nothing runs);
2. learns the booted commit, its ref and remote, and the remote's GPG keys;
3. fetches updates/REF/index.json and its signature from beside the repository and refuses
   an index that does not verify with those keys;
4. with a delta file from the booted commit, downloads it with range requests into
   /var/lib/microshift-update/staging (resumed after a cut or a reboot, capped in bytes per
   second), checks size and sha256, applies it offline; without one (or no index at all),
   `ostree pull`s the ref;
5. verifies the new commit's signature as a pull would and stages the deployment;
   greenboot then decides at the next boot, and rolls back a bad update as always;
6. reboots when update.yaml says so, inside its maintenance window.

`microshift-update status` prints the state (idle, held by a rollout, downloading N of M
bytes, staged, failed: reason). Every wait is bounded (builder/updater/fetch.py), one run
at a time holds the state directory's lock, the run's children die with it
(builder/updater/processes.py), and damaged state stops updates until
`microshift-update reset-state` (builder/updater/state.py). SIGTERM or SIGINT end a run
with one line (exit 143 or 130); the next run resumes. In a fleet rollout
(builder/updater/fleet.py) the run stages only when the device's wave is open, and reports
signed verdicts; `microshift-update note green|red` is greenboot's hook that notes each boot
of the staged release. Runs on the device's Python 3.9 with the standard library and PyYAML.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from types import FrameType
from typing import Any

from builder.core.errors import BuildError, InputError, ToolError
from builder.updater.apply import tool_reason
from builder.updater.freshness import ACCEPTED, AcceptedFile
from builder.updater.outcome import OutcomeFile
from builder.updater.processes import ChildRunner
from builder.updater.run import ROLLED_BACK, STAGED, Run, read_commits, read_staged
from builder.updater.state import (
    FLAG,
    Busy,
    DamagedState,
    check_flag,
    flag_damage,
    fresh_scratch,
    move_aside,
    run_lock,
)
from builder.updater.status import STATE_DIR, STATUS, Status, StatusFile
from builder.updater.update_config import CONFIG_PATH, UpdateConfig, load_update_config


class Terminated(BaseException):
    """SIGTERM or SIGINT, raised where the run is. Not a BuildError: the handlers that let a
    run go on after an error (a verdict that could not be signed, ...) must not swallow a
    stop, or a run told to end goes on pulling."""

    def __init__(self, signum: int) -> None:
        name = signal.Signals(signum).name
        super().__init__(f"terminated ({name}): the run stopped; the next run resumes")
        self.exit_code = 128 + signum


def main(argv: Sequence[str] | None = None) -> int:
    root_default = Path(os.environ.get("MICROSHIFT_ROOT") or "/")
    parser = argparse.ArgumentParser(
        prog="microshift-update",
        description="Update this device to the newest signed commit of its ostree ref, "
                    "downloading only the static delta from the booted commit.")
    parser.add_argument("--root", type=Path, default=root_default,
                        help="the system root (default: $MICROSHIFT_ROOT, else /)")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    run = actions.add_parser("run", help="check for an update, download, verify and stage it")
    run.add_argument("--config", type=Path,
                     help="the configuration (default: ROOT/etc/microshift/update.yaml)")
    run.add_argument("--report", type=Path, help="write what the run did as JSON here")
    status = actions.add_parser("status", help="print the updater's state")
    status.add_argument("--json", action="store_true", help="print the state as JSON")
    note = actions.add_parser("note", help="greenboot's green.d/red.d hooks: note this boot's "
                                           "result for the staged rollout update's verdict")
    note.add_argument("result", choices=("green", "red"))
    actions.add_parser("reset-state", help="move damaged state files aside and let updates "
                                           "run again")
    args = parser.parse_args(argv)
    if args.action == "status":
        return print_status(args.root, as_json=args.json)
    if args.action == "note":
        return note_boot(args.root, args.result)
    if args.action == "reset-state":
        return reset_state(args.root)
    return run_once(args.root, args.config or args.root / CONFIG_PATH, args.report)


def note_boot(root: Path, result: str) -> int:
    """Never fails the hook: greenboot's verdict is greenboot's, this only records it."""
    status_file = StatusFile(root / STATE_DIR / STATUS)
    try:
        config = load_update_config(root / CONFIG_PATH)
    except InputError:
        config = UpdateConfig()
    try:
        if Run(root, config, ChildRunner(), status_file, log).note(result):
            log(f"noted a {result} boot for the staged update's verdict")
    except (BuildError, OSError) as exc:
        log(f"could not note the {result} boot: {one_line(exc)}")
    return 0


def print_status(root: Path, *, as_json: bool) -> int:
    state = root / STATE_DIR
    try:
        status = StatusFile(state / STATUS).read()
    except DamagedState as exc:
        print(f"damaged: {exc}")
        return 1
    flag = state / FLAG
    if flag.exists() and status.state != "failed":
        print(f"damaged: {flag.read_text(errors='replace').strip()}")
        return 1
    print(json.dumps(asdict(status), indent=2, sort_keys=True) if as_json else status.text())
    return 1 if status.state == "failed" else 0


def reset_state(root: Path) -> int:
    """Move each state file that does not parse aside, and lift the refusal."""
    state = root / STATE_DIR
    readers: list[tuple[Path, Callable[[], Any]]] = [
        (state / STATUS, StatusFile(state / STATUS).read),
        (state / ACCEPTED, AcceptedFile(state / ACCEPTED).read_all),
        (state / ROLLED_BACK, lambda: read_commits(state / ROLLED_BACK)),
        (state / STAGED, lambda: read_staged(state / STAGED)),
        (state / "outcome.json", OutcomeFile(state).read)]
    for path, read in readers:
        try:
            read()
        except DamagedState:
            print(f"{path}: damaged, moved aside to {move_aside(path, time.time()).name}")
    kept = sorted(p.name for p in state.glob("*.damaged-*")) if state.is_dir() else []
    if (state / FLAG).exists():
        (state / FLAG).unlink()
        print("updates run again at the next run"
              + (f"; damaged files kept for a look: {', '.join(kept)}" if kept else ""))
    else:
        print("nothing to reset: no damaged state is recorded")
    return 0


def run_once(root: Path, config_path: Path, report: Path | None) -> int:
    status_file = StatusFile(root / STATE_DIR / STATUS)
    started = time.monotonic()
    try:
        config = load_update_config(config_path)
    except InputError as exc:
        _failed(status_file, str(exc))
        return 2
    state = status_file.path.parent
    updater: Run | None = None
    code = 0
    previous = _on_signals(_terminate)
    try:
        with run_lock(state):
            check_flag(state)
            updater = Run(root, config, ChildRunner(), status_file, log,
                          scratch=fresh_scratch(state))
            try:
                updater.run()
            finally:
                fresh_scratch(state)
    except Busy as exc:
        log(str(exc))  # another run's status is that run's to write
        return 1
    except DamagedState as exc:
        _failed(status_file, flag_damage(state, exc))
        code = 1
    except Terminated as exc:
        _failed(status_file, str(exc))
        code = exc.exit_code
    except BuildError as exc:
        _failed(status_file, one_line(exc))
        code = exc.exit_code if isinstance(exc, InputError) else 1
    finally:
        _on_signals(previous)
    if report is not None and updater is not None:
        document = {**updater.report(), "seconds": round(time.monotonic() - started, 3),
                    "exit_code": code}
        report.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    return code


def _terminate(signum: int, frame: FrameType | None) -> None:
    # Raised where the run is: a child it waits for is killed by subprocess on the way out.
    raise Terminated(signum)


def _on_signals(handlers: Any) -> Any:
    """Install `handlers` (one for both signals, or a previous pair); the previous pair."""
    signals = (signal.SIGTERM, signal.SIGINT)
    previous = tuple(signal.getsignal(signum) for signum in signals)
    wanted = handlers if isinstance(handlers, tuple) else (handlers, handlers)
    for number, signum in enumerate(signals):  # (Python 3.9: no zip strict)
        handler = wanted[number]
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    return previous


def one_line(exc: BaseException) -> str:
    """The line the status shows: for a tool, the tool and its own reason."""
    if isinstance(exc, ToolError):
        words = [w for w in exc.argv[1:] if not w.startswith("-")][:2]
        return f"{exc.argv[0]} {' '.join(words)} failed (exit {exc.returncode}): " \
               f"{tool_reason(exc)}"
    lines = str(exc).splitlines()
    return lines[0] if lines else type(exc).__name__


def _failed(status_file: StatusFile, message: str) -> None:
    try:
        status = status_file.read()
    except DamagedState:
        status = Status()  # the damaged one was moved aside, or is named by the message
    status.state, status.detail = "failed", message
    status_file.write(status)
    log(f"failed: {message}")


def log(message: str) -> None:
    sys.stderr.write(f"microshift-update: {message}\n")
    sys.stderr.flush()
