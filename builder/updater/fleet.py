"""The updater's part in a fleet rollout: hold outside the open waves, report verdicts.

A run (builder/updater/run.py) asks `Fleet.gate` before it downloads anything: with the
statement's rollout of the index's head halted, or the device's wave not open, the device
stays as it is, downloads nothing, and `microshift-update status` says why
("held: ..."). Otherwise the run goes on and the fleet hears of it: offered, downloaded,
staged (builder/updater/verdicts.py), and, after greenboot has judged the new release,
green or rolled-back (builder/updater/outcome.py).

Device side: Python 3.9, standard library only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.core.errors import BuildError
from builder.core.runner import Runner
from builder.updater.outcome import Outcome, OutcomeFile, note, settled
from builder.updater.update_config import UpdateConfig
from builder.updater.verdicts import DeviceKey, Outbox, report
from builder.updater.waves import Rollout, hold_reason, wave_of

MACHINE_ID = "etc/machine-id"


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

    def event(self, event: str, **fields: Any) -> None:
        if self.place is None:
            return
        payload = {"machine_id": self.machine_id(), "ref": self.place.ref,
                   "rollout": self.place.rollout.id, "commit": self.place.rollout.commit,
                   "wave": self.place.wave, "event": event, "from_commit": "",
                   "from_version": "", "version": "", "boots": 0, "failed_check": "",
                   "labels": self.config.label_map(), **fields}
        report(self.outbox, payload, self.log)

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
