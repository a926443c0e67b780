"""The updater's part in a fleet rollout: hold outside the open waves, report verdicts.

A run (builder/updater/run.py) asks `Fleet.gate` before it downloads anything: with the
statement's rollout of the index's head halted, or the device's wave not open, the device
stays as it is, downloads nothing, and `microshift-update status` says why
("held: ..."). Otherwise the run goes on and the fleet hears of it: offered, downloaded,
staged (builder/updater/verdicts.py), and, after greenboot has judged the new release,
green or rolled-back (builder/updater/outcome.py). A rollout's own windows for the
device's label group and its disruption budget (builder/updater/rollout_rules.py) are
read here too: a run they hold has downloaded and stops before staging.

A run held (by a window or the budget) is remembered in HELD until the device stages, and
every verdict made meanwhile carries it, `"held": {"reason", "since"}`, so the admin sees
why a device waits and since when (the downloaded verdict of the very run it held first).
While the same hold lasts, its offered and downloaded verdicts are made once each.

Device side: Python 3.9, standard library only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.core.errors import BuildError
from builder.core.runner import Runner
from builder.updater.outcome import Outcome, OutcomeFile, note, settled
from builder.updater.rollout_rules import GroupWindows, budget_hold, windows_for
from builder.updater.state import write_atomic
from builder.updater.update_config import UpdateConfig
from builder.updater.verdicts import DeviceKey, Outbox, report
from builder.updater.waves import Rollout, hold_reason, wave_of

MACHINE_ID = "etc/machine-id"
HELD = "held.json"   # in the state directory: {rollout, commit, reason, since}


@dataclass(frozen=True)
class Place:
    """This device in the rollout of the commit it is about to stage."""

    rollout: Rollout
    wave: int
    ref: str


class Fleet:
    def __init__(self, root: Path, state: Path, config: UpdateConfig, runner: Runner,
                 log: Callable[[str], None]) -> None:
        self.root = root
        self.config = config
        self.log = log
        self.outbox = Outbox(state, DeviceKey(state, runner))
        self.outcomes = OutcomeFile(state)
        self.held_file = state / HELD
        self.place: Place | None = None

    def machine_id(self) -> str:
        try:
            text = (self.root / MACHINE_ID).read_text().strip()
        except OSError:
            text = ""
        if not text:
            raise BuildError(f"/{MACHINE_ID} is missing or empty: this device has no place "
                             "in the rollout", hint="systemd writes it at the first boot")
        return text

    def gate(self, rollout: Rollout | None, ref: str, target: str) -> str | None:
        """Why the device must hold now (the status says it), or None to go on."""
        if rollout is None or rollout.commit != target:
            # No rollout, or one of an older head: the index's head goes to every device,
            # as it did before rollouts.
            self.place = None
            return None
        wave = wave_of(rollout, self.machine_id(), self.config.label_map())
        reason = hold_reason(rollout, wave)
        self.place = None if reason else Place(rollout, wave, ref)
        return reason

    def windows(self) -> GroupWindows | None:
        """The rollout's windows for this device's label group, if it names any."""
        if self.place is None:
            return None
        return windows_for(self.place.rollout.windows, self.config.label_map())

    def budget_hold(self) -> str | None:
        """Why the disruption budget keeps this device from staging now, or None."""
        if self.place is None:
            return None
        return budget_hold(self.place.rollout.budget, self.machine_id(),
                           self.config.label_map())

    def held(self, reason: str | None) -> None:
        """Remember this run's hold (None: the run goes on to stage, the hold is over)."""
        if self.place is None:
            return
        if reason is None:
            self.held_file.unlink(missing_ok=True)
            return
        previous = self._hold()
        same = previous is not None and _kind(previous["reason"]) == _kind(reason)
        self._write_hold(reason[:512], previous["since"] if previous and same
                         else int(time.time()), previous["reported"] if previous and same
                         else [])

    def _write_hold(self, reason: str, since: int, reported: list[str]) -> None:
        assert self.place is not None
        write_atomic(self.held_file, json.dumps(
            {"rollout": self.place.rollout.id, "commit": self.place.rollout.commit,
             "reason": reason, "since": since, "reported": reported}))

    def _hold(self) -> dict[str, Any] | None:
        """The hold remembered for the rollout now in place. Read leniently: the record
        only informs the admin, and a lost one costs only its `since`."""
        try:
            found = json.loads(self.held_file.read_text())
        except (OSError, ValueError):
            return None
        place = self.place
        if not isinstance(found, dict) or place is None or \
                (found.get("rollout"), found.get("commit")) != (place.rollout.id,
                                                                place.rollout.commit) or \
                not isinstance(found.get("reason"), str) or \
                not isinstance(found.get("since"), int):
            return None
        reported = found.get("reported")
        found["reported"] = reported if isinstance(reported, list) else []
        return found

    def event(self, event: str, **fields: Any) -> None:
        if self.place is None:
            return
        payload = {"machine_id": self.machine_id(), "ref": self.place.ref,
                   "rollout": self.place.rollout.id, "commit": self.place.rollout.commit,
                   "wave": self.place.wave, "event": event, "from_commit": "",
                   "from_version": "", "version": "", "boots": 0, "failed_check": "",
                   "labels": self.config.label_map(), **fields}
        hold = self._hold()
        if hold is None:
            report(self.outbox, payload, self.log)
            return
        if event in hold["reported"]:
            # Said already for this hold: a device that waits days for a slot or a window
            # would otherwise spend the collector's verdicts per device on repeats.
            self.log(f"verdict {event} not made again: held since {hold['since']}")
            return
        payload["held"] = {"reason": hold["reason"], "since": hold["since"]}
        report(self.outbox, payload, self.log)
        if event in ("offered", "downloaded"):
            self._write_hold(hold["reason"], hold["since"], [*hold["reported"], event])

    def staged(self, outcome: Outcome) -> None:
        """The commit is staged: keep what its verdict needs, in a file of its own."""
        if self.place is None:
            return
        self.outcomes.write(outcome)
        self.event("staged", from_commit=outcome.from_commit,
                   from_version=outcome.from_version, version=outcome.target_version)

    def settle(self, booted: str, pending: str | None) -> None:
        """After greenboot judged the staged release: its verdict, once."""
        outcome = self.outcomes.read()
        if outcome is None:
            return
        verdict = settled(outcome, booted, pending)
        if verdict is None:
            return
        try:
            machine = self.machine_id()
        except BuildError as exc:
            self.log(f"verdict {verdict} not made: {exc}")
            return
        # The labels place the device in its wave: the collector checks the claim.
        report(self.outbox, {**outcome.payload(verdict, machine),
                             "labels": self.config.label_map()}, self.log)
        self.outcomes.remove()
        self.log(f"{outcome.target[:12]} of rollout {outcome.rollout}: {verdict}")

    def note(self, kind: str, booted: str, pending: str | None) -> bool:
        """greenboot's hooks: what this boot says of the staged release."""
        outcome = self.outcomes.read()
        if outcome is None or not note(outcome, kind, self.root, booted, pending):
            return False
        self.outcomes.write(outcome)
        return True

    def send(self) -> None:
        try:
            self._send()
        except (OSError, BuildError) as exc:  # the run's own outcome matters more
            self.log(f"verdicts not sent: {str(exc).splitlines()[0]}")

    def _send(self) -> None:
        url = self.config.collector_url
        pending = self.outbox.pending()
        if not pending:
            return
        if not url:
            self.log(f"{len(pending)} verdicts wait in {self.outbox.dir} (no collector_url: "
                     "`rollout collect` takes them)")
            return
        # Verdicts go out whatever the run did, also after its deadline: their own bound.
        budget = time.monotonic() + max(60.0, 3.0 * self.config.timeout_seconds)
        sent = self.outbox.send(url, self.config.patience(budget), self.log)
        self.log(f"collector {url} took {sent} of {len(pending)} verdicts")


def _kind(reason: str) -> str:
    """What holds a run, apart from its changing details: the same hold keeps its since."""
    return " ".join(reason.split()[:3])
