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
bytes, staged, failed: reason). In a fleet rollout (builder/updater/fleet.py) the run stages
only when the device's wave is open, and reports signed verdicts; `microshift-update note
green|red` is greenboot's hook that notes each boot of the staged release. Runs on the
device's Python 3.9 with the standard library and PyYAML.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from builder.core.errors import BuildError, InputError
from builder.core.runner import Runner
from builder.updater.config import CONFIG_PATH, UpdateConfig, load_update_config
from builder.updater.run import Run
from builder.updater.status import STATE_DIR, STATUS, StatusFile


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
    args = parser.parse_args(argv)
    if args.action == "status":
        return print_status(args.root, as_json=args.json)
    if args.action == "note":
        return note_boot(args.root, args.result)
    return run_once(args.root, args.config or args.root / CONFIG_PATH, args.report)


def note_boot(root: Path, result: str) -> int:
    """Never fails the hook: greenboot's verdict is greenboot's, this only records it."""
    status_file = StatusFile(root / STATE_DIR / STATUS)
    try:
        config = load_update_config(root / CONFIG_PATH)
    except InputError:
        config = UpdateConfig()
    try:
        if Run(root, config, Runner(), status_file, log).note(result):
            log(f"noted a {result} boot for the staged update's verdict")
    except (BuildError, OSError) as exc:
        log(f"could not note the {result} boot: {str(exc).splitlines()[0]}")
    return 0


def print_status(root: Path, *, as_json: bool) -> int:
    status = StatusFile(root / STATE_DIR / STATUS).read()
    print(json.dumps(asdict(status), indent=2, sort_keys=True) if as_json else status.text())
    return 1 if status.state == "failed" else 0


def run_once(root: Path, config_path: Path, report: Path | None) -> int:
    status_file = StatusFile(root / STATE_DIR / STATUS)
    started = time.monotonic()
    try:
        config = load_update_config(config_path)
    except InputError as exc:
        _failed(status_file, str(exc))
        return 2
    updater = Run(root, config, Runner(), status_file, log)
    code = 0
    try:
        updater.run()
    except BuildError as exc:
        _failed(status_file, str(exc).splitlines()[0])
        code = 2 if isinstance(exc, InputError) else 1
    if report is not None:
        document = {**updater.report(), "seconds": round(time.monotonic() - started, 3),
                    "exit_code": code}
        report.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    return code


def _failed(status_file: StatusFile, message: str) -> None:
    status = status_file.read()
    status.state, status.detail = "failed", message
    status_file.write(status)
    log(f"failed: {message}")


def log(message: str) -> None:
    sys.stderr.write(f"microshift-update: {message}\n")
    sys.stderr.flush()
