"""The published site a simulated device updates from, and what the updater tests check of
a device after a refused update (tests/device/test_update.py, test_freshness.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from builder.core.ostree import Repo, delta_dir
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.core.signing import ensure_sample_key, sign_detached, stop_agent
from builder.device.boot import boot
from builder.device.commits import SAMPLE_REF, UpdatePair
from builder.device.health_server import ApiServer
from builder.device.sysroot import Device
from builder.device.updater_run import (
    UPDATER,
    UpdateFailed,
    UpdateOptions,
    UpdateReport,
    run_updater,
)
from builder.publish.offline import INDEX, index_json, offline_name, write_offline_file
from builder.publish.statement_signing import sign_timestamp

SIM = {"retry_delay_seconds": 0, "timeout_seconds": 20}


def site(pair: UpdatePair, tmp_path: Path) -> Path:
    """A copy of the published site (repo/, updates/) this test may tamper with."""
    site = tmp_path / "site"
    shutil.copytree(pair.repo, site / "repo", symlinks=True)
    shutil.copytree(pair.repo.parent / "updates", site / "updates")
    return site / "repo"


def booted_device(pair: UpdatePair, tmp_path: Path, commit: str | None = None) -> Device:
    device = Device(tmp_path / "device", Runner(), Progress())
    device.init("edge")
    deployment = device.install(pair.repo, pair.ref, commit=commit or pair.v1,
                                gpg_key=pair.public_key)
    # Short greenboot waits, as the scenarios set them (/etc carries over to v2).
    device.write_greenboot_conf(deployment, {"MICROSHIFT_WAIT_TIMEOUT_SEC": "1"})
    with ApiServer() as api:
        assert boot(device, api, {}).healthy
    return device


def updates(repo: Path) -> Path:
    return repo.parent / "updates" / SAMPLE_REF


def status(device: Device) -> str:
    root = device.state_dir / "root"
    proc = subprocess.run([root / UPDATER, "--root", root, "status"], capture_output=True,
                          text=True, check=False)
    return proc.stdout.strip()


def refused(device: Device, repo: Path, pair: UpdatePair, words: str, *,
             offered: str | None = None, config: dict[str, object] | None = None
             ) -> UpdateReport:
    """The run fails naming `words`, the device is as it was, `offered` (default v2; "" when
    the device already has every commit) never reached its repository, status says why."""
    before = [d.id for d in device.deployments()]
    with pytest.raises(UpdateFailed) as caught:
        run_updater(device, repo, UpdateOptions(config={**SIM, **(config or {})}))
    assert words in str(caught.value)
    assert [d.id for d in device.deployments()] == before
    assert device.grubenv.counter() is None
    if offered != "":
        assert not device.repo.has_commit(offered or pair.v2)
    assert status(device).startswith("failed: ") and words in status(device)
    return caught.value.report


def offer(pair: UpdatePair, repo_path: Path, source: str, target: str,
           version: str | None) -> None:
    """Publish a delta file source -> target and an index offering it, signed with the key
    the device trusts."""
    repo = Repo(repo_path, Runner())
    if f"{source}-{target}" in repo.delta_list():
        repo.delta_delete(source, target)
    repo.delta_generate(target, source, extra=["--min-fallback-size=0"])
    out = updates(repo_path)
    for old in out.glob("*.delta"):
        old.unlink()
    offline = write_offline_file(delta_dir(repo_path, source, target),
                                 out / offline_name(source, target), None)
    (out / INDEX).write_text(index_json(SAMPLE_REF, target, version, [offline]))
    sign_index(pair, out / INDEX)


def sign_index(pair: UpdatePair, index: Path, validity: int = 3600) -> None:
    """Sign with the key the device trusts, and state that the index is current."""
    runner = Runner()
    homedir = pair.public_key.parent if pair.public_key else pair.repo
    key = ensure_sample_key(runner, Progress(), homedir, 0)
    sign_detached(runner, key, index)
    sign_timestamp(runner, key, index.parent, SAMPLE_REF, validity)
    stop_agent(runner, homedir)
