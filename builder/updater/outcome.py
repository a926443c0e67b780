"""What became of a staged rollout update, kept until its verdict is made.

/var/lib/microshift-update/outcome.json is written when the updater stages a commit of a
rollout, in a file of its own: a later run that is held or fails rewrites status.json, never
this. greenboot then adds to it through two hooks of the microshift-update package:

    /usr/lib/greenboot/red.d/50-microshift-update-note.sh     `microshift-update note red`
    /usr/lib/greenboot/green.d/50-microshift-update-note.sh   `microshift-update note green`

red.d runs after every failed boot: on the new release, it notes the boot, the health
check that failed (the first line of MicroShift's check failure log) and the log's last
LOG_LINES lines (what failed to start, in the check's words), for the admin's console.
green.d runs after a healthy boot: on the new release, the update is green; on another
deployment while the new one is no longer staged, greenboot has rolled it back. The next
updater run turns the notes into the signed verdict (builder/updater/verdicts.py) and
removes the file; when a hook did not run (a device without greenboot's hooks, a crash),
the run infers the same from what is booted and what is staged, only without the boots and
the failed check.

Device side: Python 3.9, standard library only.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from builder.core.bounded_json import Doc
from builder.updater.state import read_json, write_atomic

OUTCOME = "outcome.json"
FAILURE_LOG = "run/microshift-greenboot/healthcheck-failure.log"
BOOT_ID = "proc/sys/kernel/random/boot_id"
VERDICT = re.compile(r"^(|green|rolled-back)$")
LOG_LINES = 10      # of the failure log, each cut at LINE_CHARS: what a verdict carries
LINE_CHARS = 200
MAX_LOG = LOG_LINES * (LINE_CHARS + 1)


@dataclass
class Outcome:
    ref: str
    rollout: str
    wave: int
    target: str
    target_version: str
    from_commit: str
    from_version: str
    red_boots: list[dict[str, str]] = field(default_factory=list)  # {boot, check}
    verdict: str = ""   # "", "green" or "rolled-back", as greenboot's hooks saw it

    def payload(self, verdict: str, machine_id: str) -> dict[str, Any]:
        boots = len(self.red_boots) + (1 if verdict == "green" else 0)
        failed = self.red_boots[-1]["check"] if self.red_boots else ""
        log = self.red_boots[-1].get("log", "") if self.red_boots else ""
        return {"machine_id": machine_id, "ref": self.ref, "rollout": self.rollout,
                "commit": self.target, "wave": self.wave, "event": verdict,
                "from_commit": self.from_commit, "from_version": self.from_version,
                "version": self.target_version, "boots": boots, "failed_check": failed,
                **({"failed_log": log} if log else {})}


class OutcomeFile:
    def __init__(self, state: Path) -> None:
        self.path = state / OUTCOME

    def read(self) -> Outcome | None:
        """None when nothing of a rollout is staged; DamagedState for a file that does not
        hold an outcome (builder/updater/state.py)."""
        data = read_json(self.path, _outcome_document)
        return None if data is None else _outcome_document(data)

    def write(self, outcome: Outcome) -> None:
        write_atomic(self.path, json.dumps(asdict(outcome), indent=2, sort_keys=True) + "\n")

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def _outcome_document(data: Any) -> Outcome:
    doc = Doc(data, OUTCOME)
    text = {name: doc.text(name, max_length=1024) for name in
            ("ref", "rollout", "target", "target_version", "from_commit", "from_version")}
    boots = []
    for number, entry in enumerate(doc.array("red_boots", required=False, max_items=1000)):
        boot = Doc(entry, OUTCOME, f"red_boots[{number}]")
        boots.append({"boot": boot.text("boot", max_length=256),
                      "check": boot.text("check", max_length=1024),
                      "log": boot.text("log", required=False, default="",
                                       max_length=MAX_LOG)})
    verdict = doc.text("verdict", required=False, default="", pattern=VERDICT,
                       allowed="'', green or rolled-back")
    return Outcome(wave=doc.integer("wave", 0, 1000), red_boots=boots, verdict=verdict, **text)


def note(outcome: Outcome, kind: str, root: Path, booted: str, pending: str | None) -> bool:
    """Add what greenboot found on this boot (`kind`: red or green); whether it changed."""
    if outcome.verdict:
        return False
    if booted == outcome.target:
        if kind == "green":
            outcome.verdict = "green"
            return True
        boot = _first_line(root / BOOT_ID) or "unknown"
        if any(entry.get("boot") == boot for entry in outcome.red_boots):
            return False
        outcome.red_boots.append({"boot": boot,
                                  "check": _first_line(root / FAILURE_LOG) or "unknown",
                                  "log": _last_lines(root / FAILURE_LOG)})
        return True
    if pending != outcome.target:
        # The new release neither runs nor waits to boot: greenboot rolled it back (the
        # previous deployment's boot, healthy or not, is where that shows).
        outcome.verdict = "rolled-back"
        return True
    return False


def settled(outcome: Outcome, booted: str, pending: str | None) -> str | None:
    """The final verdict, once there is one: called by an updater run, which runs only on a
    boot greenboot found healthy."""
    if outcome.verdict:
        return outcome.verdict
    if booted == outcome.target:
        return "green"
    if pending != outcome.target:
        return "rolled-back"
    return None


def _last_lines(path: Path) -> str:
    """The log's last LOG_LINES non-empty lines, each cut at LINE_CHARS characters, with
    what is not printable (escape sequences) made '?'."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - 64 * 1024))
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()][-LOG_LINES:]
    return "\n".join("".join(c if c.isprintable() else "?" for c in line)[:LINE_CHARS]
                     for line in lines)


def _first_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines()]
    except OSError:
        return ""
    return next((line for line in lines if line), "")[:200]
