"""A published site with a rollout in its signed statement, and devices that sign verdicts
the way microshift-update does (builder/updater/verdicts.py, with the real openssl)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.core.runner import Runner
from builder.core.signing import SigningKey
from builder.publish.rollout_statement import RolloutPlan, parse_waves, resign
from builder.rollout.admin import Signer, Site
from builder.updater.freshness import TIMESTAMP
from builder.updater.index import UpdateRefused, verify_signature
from builder.updater.rollout_rules import Budget
from builder.updater.verdicts import DeviceKey, Outbox
from builder.updater.waves import Rollout

REF = "edge/x86_64/fleet"
COMMIT = "c" * 64
T0 = 1_800_000_000   # the tests' clock: when wave 1 opened


def make_site(root: Path, key: SigningKey, waves: str = "site=lab,50%", *,
              soak: str = "1h", commit: str = COMMIT, budget: Budget | None = None) -> Site:
    """SITE/updates/REF/ with an index of `commit` and a statement carrying its rollout."""
    ref_dir = root / "updates" / REF
    ref_dir.mkdir(parents=True)
    (ref_dir / "index.json").write_text(json.dumps({"to_commit": commit}))
    plan = RolloutPlan(parse_waves(waves, soak=soak, success=95, halt=20), "fleet-test",
                       budget)
    resign(Runner(), key, ref_dir, REF, validity=86400, rollout=plan.start(REF, commit, T0))
    return Site(root)


def rollout_of(site: Site) -> Rollout:
    return site.statement(REF)[2]


def signer(key: SigningKey) -> Signer:
    return Signer(Runner(), key)


def statement_verifies(site: Site, public: Path) -> bool:
    """The statement's signature verifies with the release key, checked by the updater's
    own code as a device checks it."""
    ref_dir = site.ref_dir(REF)
    try:
        verify_signature(Runner(), (ref_dir / TIMESTAMP).read_bytes(),
                         (ref_dir / f"{TIMESTAMP}.sig").read_bytes(), [public], TIMESTAMP)
    except UpdateRefused:
        return False
    return True


@dataclass
class DeviceIdentity:
    """Not a device: a machine id and the updater's own signing and outbox code."""

    machine_id: str
    state: Path

    @property
    def outbox(self) -> Outbox:
        return Outbox(self.state, DeviceKey(self.state, Runner()))

    def verdict(self, event: str, wave: int = 0, commit: str = COMMIT,
                rollout: str = "fleet-test", **fields: Any) -> bytes:
        """Signed as the updater signs; wave 0 (lab) with the label that puts a device in
        it, as update.yaml's `labels: {site: lab}` does."""
        labels = {"site": "lab"} if wave == 0 else {}
        payload = {"machine_id": self.machine_id, "ref": REF, "rollout": rollout,
                   "commit": commit, "wave": wave, "event": event, "from_commit": "",
                   "from_version": "1.0", "version": "2.0", "boots": 0, "failed_check": "",
                   "labels": labels, **fields}
        path = self.outbox.add(payload)
        body = path.read_bytes()
        path.unlink()
        return body


def devices(root: Path, count: int) -> list[DeviceIdentity]:
    return [DeviceIdentity(f"{n:032x}", root / f"device-{n}") for n in range(count)]
