"""A fleet of simulated devices (the sysroot model: real ostree, greenboot's scripts, the
shipped microshift-update) that roll a release out through the real collector.

`MSEB_FLEET_DEVICES` sets the fleet's size and runs the tier: `nox -s fleet` runs 20
devices, CI `nox -s fleet -- 4` (two in the lab wave, at least one in each share wave);
`nox -s tests` leaves the tier out (it would take it past its 15 minutes). The first `lab` devices
carry the label site=lab; the rest are placed by the share waves. The rollout id is the
first of fleet-0, fleet-1, ... that leaves every wave at least one device, so each wave of
the test has devices to judge.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.core.signing import SigningKey, ensure_sample_key, stop_agent
from builder.device.commits import SAMPLE_REF, UpdatePair
from builder.device.health_server import ApiServer, Health
from builder.device.scenarios import boot_until_settled
from builder.device.sysroot import Device
from builder.device.updater_run import UpdateOptions, UpdateReport, run_updater
from builder.publish.rollout_statement import RolloutPlan, parse_waves
from builder.rollout.admin import Signer, Site, start
from builder.updater.waves import Rollout, wave_of
from tests.device.site import SIM, booted_device, site
from tests.support import requires
from tests.support.cli import PROJECT_ROOT

WAVES = "site=lab,30%"
SOAK = 3600
T0 = 1_800_000_000   # the tests' clock when wave 1 opens


def fleet_size() -> int:
    return int(os.environ.get("MSEB_FLEET_DEVICES", "4"))


# The fleet tier's tests: run by `nox -s fleet` (MSEB_FLEET_DEVICES set), not `nox -s tests`.
tier = pytest.mark.skipif("MSEB_FLEET_DEVICES" not in os.environ,
                          reason=f"{requires.TIER}: the fleet tier (nox -s fleet)")


@dataclass
class FleetDevice:
    device: Device
    machine_id: str
    labels: dict[str, str]
    wave: int = -1
    reports: list[UpdateReport] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.device.sysroot.name


def release_key(pair: UpdatePair) -> SigningKey:
    assert pair.public_key is not None
    return ensure_sample_key(Runner(), Progress(), pair.public_key.parent, 0)


def make_fleet(pair: UpdatePair, tmp_path: Path, count: int, *,
               lab: int | None = None) -> list[FleetDevice]:
    lab = max(2, count * 3 // 20) if lab is None else lab
    fleet = []
    for number in range(count):
        device = booted_device(pair, tmp_path / f"d{number:02d}")
        machine_id = f"{number + 1:032x}"
        # systemd writes /etc/machine-id at the first boot; /etc carries over to v2.
        (device.deployments()[0].path / "etc/machine-id").write_text(machine_id + "\n")
        labels = {"site": "lab"} if number < lab else {"site": "field"}
        fleet.append(FleetDevice(device, machine_id, labels))
    return fleet


def plan_for(fleet: list[FleetDevice], *, every_wave: bool) -> RolloutPlan:
    """The plan, with an id that leaves no wave empty (when `every_wave`)."""
    waves = parse_waves(WAVES, soak=f"{SOAK}s", success=95, halt=20)
    for number in range(100):
        plan = RolloutPlan(waves, f"fleet-{number}")
        rollout = plan.start(SAMPLE_REF, "0" * 64, T0)
        places = {wave_of(rollout, d.machine_id, d.labels) for d in fleet}
        if places == set(range(len(waves))) or not every_wave:
            return plan
    raise AssertionError("no rollout id places a device in every wave")


def start_rollout(pair: UpdatePair, repo: Path, fleet: list[FleetDevice], *,
                  every_wave: bool = True) -> Rollout:
    key = release_key(pair)
    try:
        rollout = start(Site(repo.parent), Signer(Runner(), key), SAMPLE_REF,
                        plan_for(fleet, every_wave=every_wave), T0)
    finally:
        stop_agent(Runner(), key.homedir)
    for member in fleet:
        member.wave = wave_of(rollout, member.machine_id, member.labels)
    return rollout


def published_site(pair: UpdatePair, tmp_path: Path) -> Path:
    """A copy of the published site (repo/, updates/): the repo path devices pull from."""
    return site(pair, tmp_path)


def update(member: FleetDevice, repo: Path, collector: str,
           extra: dict[str, object] | None = None) -> UpdateReport:
    """One run of the device's microshift-update, as its timer starts it."""
    config = {**SIM, "collector_url": collector, "labels": member.labels, **(extra or {})}
    report, _ = run_updater(member.device, repo, UpdateOptions(config=config))
    member.reports.append(report)
    return report


def boot(member: FleetDevice, pair: UpdatePair, v2: Health) -> None:
    with ApiServer() as api:
        boot_until_settled(member.device, api, {pair.v2: v2})


def status_text(member: FleetDevice) -> str:
    from tests.device.site import status
    return status(member.device)


@contextmanager
def collector(repo: Path, db: Path, pair: UpdatePair, *options: str) -> Iterator[str]:
    """`rollout serve` on the site, with the release key for its automatic halt (and the
    console's actions)."""
    key = release_key(pair)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "builder", "--json", "rollout", "serve",
                             "--site", str(repo.parent), "--db", str(db), "--listen",
                             "127.0.0.1:0", "--gpg-homedir", str(key.homedir), "--gpg-key",
                             key.key_id, *options], stderr=subprocess.PIPE, env=env,
                            cwd=PROJECT_ROOT)
    try:
        assert proc.stderr is not None
        url = ""
        for line in iter(proc.stderr.readline, b""):
            url = json.loads(line).get("url") or ""
            if url:
                break
        assert url, f"the collector exited ({proc.wait()}) without listening"
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        stop_agent(Runner(), key.homedir)
