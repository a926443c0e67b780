"""The shipped updater (microshift-update, from the deployment the device booted) against the
real published repository served over HTTP: real ostree, real GPG signatures, real delta
files. What an admin relies on: only the delta file crosses the link, a cut resumes, and
anything tampered with or unsigned is refused with nothing staged.

Integration tier: runs ostree, gpg, bash and the zip application with the host's python3.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from builder.core.ostree import commit_signed
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.core.signing import ensure_sample_key, sign_detached, stop_agent
from builder.device.commits import SAMPLE_REF, UpdatePair
from builder.device.health_server import ApiServer, Health
from builder.device.scenarios import boot_until_settled
from builder.device.updater_run import (
    STATUS,
    UpdateFailed,
    UpdateOptions,
    run_updater,
)
from builder.publish.offline import INDEX, offline_name
from tests.device.site import (
    SIM,
    booted_device,
    offer,
    refused,
    sign_index,
    site,
    status,
    updates,
)
from tests.support import requires

pytestmark = [pytest.mark.integration,
              requires.root_only("booting the simulated device makes a network namespace"),
              pytest.mark.usefixtures("deletable_sysroots")]


def test_only_the_delta_file_crosses_the_link_and_v2_is_staged(pair: UpdatePair,
                                                               tmp_path: Path) -> None:
    device = booted_device(pair, tmp_path)
    report, deployment = run_updater(device, pair.repo, UpdateOptions(config=SIM))
    assert report.method == "delta-file" and deployment.checksum == pair.v2
    delta = (updates(pair.repo) / offline_name(pair.v1, pair.v2)).stat().st_size
    assert report.delta_bytes == delta
    assert report.bytes_on_wire == delta + report.metadata_bytes
    assert report.bytes_on_wire <= 1.02 * delta
    assert [d.checksum for d in device.deployments()] == [pair.v2, pair.v1]
    assert device.grubenv.counter() == 3  # greenboot now judges v2
    assert status(device).startswith(f"staged 4.14.2-sample.2 ({pair.v2[:12]})")
    assert not any((device.stateroot_var / "lib/microshift-update/staging").glob("*"))
    again, _ = run_updater(device, pair.repo, UpdateOptions(config=SIM))
    assert again.method is None and "already staged" in " ".join(again.log)


def test_on_a_boot_greenboot_found_unhealthy_the_updater_touches_nothing(
        pair: UpdatePair, tmp_path: Path) -> None:
    """A red boot (the timer may fire before redboot reboots) must not overwrite what was
    staged: the run on the rolled-back deployment reads it to know the update failed (the VM
    tier found the updater staging a rolled-back update again when it did)."""
    device = booted_device(pair, tmp_path)
    units = device.state_dir / "root/run/device-sim/units"
    (units / "greenboot-healthcheck.service.is-active").write_text("failed\n")
    status = device.state_dir / "root" / STATUS
    status.parent.mkdir(parents=True, exist_ok=True)
    staged = json.dumps({"state": "staged", "target": pair.v2}) + "\n"
    status.write_text(staged)
    report, deployment = run_updater(device, pair.repo, UpdateOptions(config=SIM))
    assert report.method is None and report.bytes_on_wire == 0
    assert "unhealthy" in " ".join(report.log)
    assert deployment.checksum == pair.v1 and len(device.deployments()) == 1
    assert status.read_text() == staged


def test_a_cut_run_leaves_the_part_and_the_next_run_resumes_it(pair: UpdatePair,
                                                               tmp_path: Path) -> None:
    device = booted_device(pair, tmp_path)
    with pytest.raises(UpdateFailed) as caught:
        run_updater(device, pair.repo, UpdateOptions(
            interruptions=1, seed=7, config={**SIM, "retries": 0}))
    first = caught.value.report
    assert first.interruptions == 1 and device.deployments()[0].checksum == pair.v1
    assert status(device).startswith("failed: download of ")
    report, deployment = run_updater(device, pair.repo, UpdateOptions(config=SIM))
    assert deployment.checksum == pair.v2
    delta = report.delta_bytes or 0
    staged_before = delta - (report.bytes_on_wire - report.metadata_bytes)
    assert 0 < staged_before < delta  # the second run fetched only what the first had not
    assert first.bytes_on_wire - first.metadata_bytes == staged_before


def test_a_delta_file_altered_by_one_byte_is_refused(pair: UpdatePair, tmp_path: Path) -> None:
    repo = site(pair, tmp_path)
    delta = updates(repo) / offline_name(pair.v1, pair.v2)
    data = bytearray(delta.read_bytes())
    data[len(data) // 2] ^= 0x01
    delta.write_bytes(bytes(data))
    refused(booted_device(pair, tmp_path), repo, pair, "the signed index says")


def test_an_index_altered_by_one_byte_is_refused(pair: UpdatePair, tmp_path: Path) -> None:
    repo = site(pair, tmp_path)
    index = updates(repo) / INDEX
    index.write_text(index.read_text().replace("sample.2", "sample.3"))
    refused(booted_device(pair, tmp_path), repo, pair, "signature does not verify")


def test_an_index_signed_by_another_key_is_refused(pair: UpdatePair, tmp_path: Path) -> None:
    repo = site(pair, tmp_path)
    runner = Runner()
    other = ensure_sample_key(runner, Progress(), tmp_path / "other-gpg", 1700000000)
    sign_detached(runner, other, updates(repo) / INDEX)
    stop_agent(runner, other.homedir)
    refused(booted_device(pair, tmp_path), repo, pair, "signature does not verify")


def test_an_index_without_its_signature_is_refused(pair: UpdatePair, tmp_path: Path) -> None:
    repo = site(pair, tmp_path)
    (updates(repo) / (INDEX + ".sig")).unlink()
    refused(booted_device(pair, tmp_path), repo, pair, "has no signature")


def test_a_delta_to_an_unsigned_commit_is_refused(pair: UpdatePair, tmp_path: Path) -> None:
    """The publisher's mistake, not an attack: v2 lost its signature before the delta was
    made. The index is signed properly; the commit is not, so nothing is staged."""
    repo_path = site(pair, tmp_path)
    # An archive repository keeps a commit's signatures in its detached metadata file.
    (repo_path / "objects" / pair.v2[:2] / f"{pair.v2[2:]}.commitmeta").unlink()
    assert not commit_signed(Runner(), repo_path, pair.v2)
    offer(pair, repo_path, pair.v1, pair.v2, None)
    refused(booted_device(pair, tmp_path), repo_path, pair,
             "does not verify with the keys of remote 'edge'")


def test_an_older_commit_is_refused_unless_the_admin_allows_downgrades(
        pair: UpdatePair, tmp_path: Path) -> None:
    """A replayed old index (properly signed, with a properly signed commit) must not roll a
    device back: the commit's timestamp is older than the booted one's."""
    repo = site(pair, tmp_path)
    offer(pair, repo, pair.v2, pair.v1, "4.14.2-sample.1")
    device = booted_device(pair, tmp_path, commit=pair.v2)
    refused(device, repo, pair, f"commit {pair.v1[:12]} is older than the booted commit "
             f"{pair.v2[:12]}: a downgrade", offered=pair.v1)
    report, deployment = run_updater(device, repo, UpdateOptions(
        config={**SIM, "allow_downgrade": True}))
    assert report.method == "delta-file" and deployment.checksum == pair.v1
    assert [d.checksum for d in device.deployments()] == [pair.v1, pair.v2]


def test_a_remote_that_does_not_verify_signatures_is_refused(pair: UpdatePair,
                                                            tmp_path: Path) -> None:
    device = booted_device(pair, tmp_path)
    device.runner.run(["ostree", f"--repo={device.repo.path}", "config", "set",
                       '--group=remote "edge"', "gpg-verify", "false"])
    report = refused(device, pair.repo, pair, "remote 'edge' has gpg-verify=false: "
                      "microshift-update installs signed commits only")
    assert report.requests == 0


def test_a_delta_file_over_the_staging_bound_is_not_downloaded(pair: UpdatePair,
                                                              tmp_path: Path) -> None:
    """The signed index says how big the file is; over staging_max_bytes, not a byte of it
    is fetched."""
    repo = site(pair, tmp_path)
    index = updates(repo) / INDEX
    data = json.loads(index.read_text())
    data["files"][0]["bytes"] = 2 * 1024 * 1024
    index.write_text(json.dumps(data))
    sign_index(pair, index)
    report = refused(booted_device(pair, tmp_path), repo, pair,
                      f"{offline_name(pair.v1, pair.v2)} is 2097152 bytes, over "
                      "staging_max_bytes 1048576", config={"staging_max_bytes": 1048576})
    assert report.bytes_on_wire == report.metadata_bytes


def test_a_device_on_the_newest_commit_fetches_nothing_more(pair: UpdatePair,
                                                           tmp_path: Path) -> None:
    device = booted_device(pair, tmp_path, commit=pair.v2)
    report, deployment = run_updater(device, pair.repo, UpdateOptions(config=SIM))
    assert report.method is None and deployment.checksum == pair.v2
    assert report.bytes_on_wire == report.metadata_bytes  # the index and its signature
    assert [d.checksum for d in device.deployments()] == [pair.v2]
    assert status(device).startswith(f"idle: up to date: {pair.v2[:12]} is the newest "
                                      f"commit of {SAMPLE_REF} (since ")


def test_without_an_index_the_updater_pulls_the_ref(pair: UpdatePair, tmp_path: Path) -> None:
    repo = site(pair, tmp_path)
    shutil.rmtree(repo.parent / "updates")
    device = booted_device(pair, tmp_path)
    report, deployment = run_updater(device, repo, UpdateOptions(config=SIM))
    assert report.method == "pull" and deployment.checksum == pair.v2
    assert "falling back to ostree pull" in " ".join(report.log)


def test_a_capped_pull_takes_every_byte_through_the_relay(pair: UpdatePair,
                                                         tmp_path: Path) -> None:
    """ostree has no rate limit: with max_bytes_per_second the fallback pull goes through
    the updater's relay, which stays under the cap, and ostree still verifies the commit."""
    repo = site(pair, tmp_path)
    shutil.rmtree(repo.parent / "updates")
    device = booted_device(pair, tmp_path)
    cap = 200_000
    report, deployment = run_updater(device, repo, UpdateOptions(
        config={**SIM, "max_bytes_per_second": cap}))
    assert report.method == "pull" and deployment.checksum == pair.v2
    log = " ".join(report.log)
    assert "through http://127.0.0.1:" in log and f"capped at {cap} B/s" in log
    # Every byte the server sent went through the relay, none around it.
    assert f"pull: {report.bytes_on_wire} bytes from " in log
    assert report.bytes_on_wire > 100_000
    assert report.seconds >= (report.bytes_on_wire - 64 * 1024) / cap


def test_a_bad_update_yaml_stops_the_updater_naming_the_key(pair: UpdatePair,
                                                            tmp_path: Path) -> None:
    device = booted_device(pair, tmp_path)
    with pytest.raises(UpdateFailed) as caught:
        run_updater(device, pair.repo, UpdateOptions(config={"max_bytes_per_second": -5}))
    assert caught.value.report.exit_code == 2 and caught.value.report.requests == 0
    assert "max_bytes_per_second" in status(device)
    assert device.deployments()[0].checksum == pair.v1


def test_an_update_greenboot_rolled_back_is_not_staged_again(pair: UpdatePair,
                                                             tmp_path: Path) -> None:
    device = booted_device(pair, tmp_path)
    run_updater(device, pair.repo, UpdateOptions(config=SIM))
    with ApiServer() as api:
        boots = boot_until_settled(device, api, {pair.v2: Health(ready_after=None)})
    assert boots[-1].deployment.checksum == pair.v1 and boots[-1].rolled_back
    report, deployment = run_updater(device, pair.repo, UpdateOptions(config=SIM))
    assert report.method is None and deployment.checksum == pair.v1
    assert report.bytes_on_wire == report.metadata_bytes  # the index only, no delta file
    assert "was rolled back by greenboot on this device" in status(device)
    remembered = device.stateroot_var / "lib/microshift-update/rolled-back"
    assert remembered.read_text().split() == [pair.v2]


def test_a_run_killed_on_a_red_boot_does_not_make_the_rollback_forgotten(
        pair: UpdatePair, tmp_path: Path) -> None:
    """redboot reboots a red boot while the updater may still be starting: the SIGTERM'd run
    writes "failed" over the status. The run on the rolled-back deployment must still know
    what was staged (the VM tier rebooted into the bad update again on every boot when it
    read that from the status alone)."""
    device = booted_device(pair, tmp_path)
    run_updater(device, pair.repo, UpdateOptions(config=SIM))
    state = device.stateroot_var / "lib/microshift-update"
    assert (state / "staged").read_text().split() == [pair.v2]
    with ApiServer() as api:
        boots = boot_until_settled(device, api, {pair.v2: Health(ready_after=None)})
    assert boots[-1].deployment.checksum == pair.v1 and boots[-1].rolled_back
    (state / "status.json").write_text(json.dumps(
        {"state": "failed", "detail": "terminated (SIGTERM): the run stopped"}) + "\n")
    report, deployment = run_updater(device, pair.repo, UpdateOptions(config=SIM))
    assert report.method is None and report.state == "idle"
    assert deployment.checksum == pair.v1 and len(device.deployments()) == 1
    assert "was rolled back by greenboot on this device" in status(device)
    assert (state / "rolled-back").read_text().split() == [pair.v2]
    assert not (state / "staged").exists()
