"""A bad image update on the simulated image-mode device: the updater stages image v2 from
its delta, v2 boots red until GRUB's counter runs out, greenboot's fallback boot rolls back
with `bootc rollback` (the SAMPLE stand-in reorders the deployments as bootc does, v2 kept
as the rollback), and the next updater runs report `rolled-back` to the fleet and never
stage v2 again (a reboot loop is an outage). The boots are the ostree path's, boot for boot.

Integration tier: real ostree, zstd, gpg, greenboot's scripts; network namespaces (root)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from builder.bootc.sample_images import IMAGE_REF, SampleImages
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.core.signing import ensure_sample_key
from builder.device.boot import BootReport, boot
from builder.device.commits import UpdatePair
from builder.device.health_server import ApiServer, Health
from builder.device.image_mode import bootc, bootc_status
from builder.device.scenarios import boot_until_settled
from builder.device.sysroot import Device
from builder.device.updater_run import UpdateOptions, run_updater
from builder.publish.rollout_statement import RolloutPlan, parse_waves
from builder.rollout.admin import Signer, Site, start
from tests.device.image_site import CONFIG, image_device, site, trust
from tests.device.site import SIM, booted_device, status
from tests.support import requires

pytestmark = [pytest.mark.integration,
              requires.root_only("booting the simulated device makes a network namespace"),
              pytest.mark.usefixtures("deletable_sysroots")]

STATE = "lib/microshift-update"
T0 = 1_800_000_000
BAD = Health(ready_after=None)   # v2's MicroShift API never becomes ready


def start_rollout(images: SampleImages, repo: Path) -> None:
    """One wave of every device, so the updater keeps an outcome and makes verdicts."""
    key = ensure_sample_key(Runner(), Progress(), images.public_key.parent, 0)
    start(Site(repo.parent), Signer(Runner(), key), IMAGE_REF,
          RolloutPlan(parse_waves("100%"), "image-rollback"), T0)


def verdicts(device: Device) -> list[dict[str, Any]]:
    """The signed verdicts waiting in the device's outbox (no collector), oldest first."""
    found = []
    for path in sorted((device.stateroot_var / STATE / "outbox").glob("*.json")):
        envelope = json.loads(path.read_text())
        found.append(json.loads(base64.b64decode(envelope["payload"])))
    return found


def signed_digest(device: Device, checksum: str) -> str:
    """The signed manifest a deployment's commit was made from: the stand-in records the
    local layout's digest, which the updater maps back (image-digests.json)."""
    local = device.repo.metadata(checksum, "ostree.manifest-digest") or ""
    digests = json.loads((device.stateroot_var / STATE / "image-digests.json").read_text())
    return str(digests.get(local, local))


def sequence(boots: list[BootReport], name: dict[str, str]) -> list[tuple[str, str, int | None]]:
    return [(name[b.deployment.checksum], "green" if b.healthy else "red", b.boot_counter)
            for b in boots]


def ostree_bad_update(pair: UpdatePair, tmp_path: Path) -> list[tuple[str, str, int | None]]:
    """The same scenario on the ostree path (tests/device/test_update.py)."""
    device = booted_device(pair, tmp_path / "ostree")
    run_updater(device, pair.repo, UpdateOptions(config=SIM))
    with ApiServer() as api:
        boots = boot_until_settled(device, api, {pair.v2: BAD})
    return sequence(boots, {pair.v1: "v1", pair.v2: "v2"})


def test_a_bad_image_is_rolled_back_by_bootc_and_never_staged_again(
        pair: UpdatePair, images: SampleImages, tmp_path: Path) -> None:
    device = image_device(pair, images, tmp_path)
    trust(device, images)
    (device.deployments()[0].path / "etc/machine-id").write_text(f"{1:032x}\n")
    v1_deployment = device.deployments()[0]
    repo = site(images, tmp_path)
    start_rollout(images, repo)
    staged, deployment = run_updater(device, repo, UpdateOptions(config=CONFIG))
    assert staged.method == "image-delta" and device.grubenv.counter() == 3
    with ApiServer() as api:
        boots = boot_until_settled(device, api, {deployment.checksum: BAD})
    name = {images.v1: "v1", images.v2: "v2"}
    image = [(name[signed_digest(device, b.deployment.checksum)],
              "green" if b.healthy else "red", b.boot_counter) for b in boots]
    assert image == [("v2", "red", 2), ("v2", "red", 1), ("v2", "red", 0), ("v1", "green", -1)]
    assert image == ostree_bad_update(pair, tmp_path)
    assert boots[-1].rolled_back and boots[-1].entry == 1
    # bootc rollback kept v2 as the rollback deployment: v1 is the default again.
    host = bootc_status(device)["status"]
    assert (host["booted"]["image"]["imageDigest"], host["staged"]) == (images.v1, None)
    assert host["rollback"]["ostree"]["checksum"] == deployment.checksum
    assert not host["rollbackQueued"]
    assert [d.id for d in device.deployments()] == [v1_deployment.id, deployment.id]
    for _ in range(2):   # the timer fires again and again: v2 is never downloaded again
        report, _ = run_updater(device, repo, UpdateOptions(config=CONFIG))
        assert report.method is None and report.bytes_on_wire == report.metadata_bytes
        assert "was rolled back by greenboot on this device" in status(device)
        assert [d.id for d in device.deployments()] == [v1_deployment.id, deployment.id]
        assert device.grubenv.counter() is None
    state = device.stateroot_var / STATE
    assert (state / "rolled-back").read_text().split() == [images.v2[len("sha256:"):]]
    assert not (state / "staged").exists()
    events = {v["event"]: v for v in verdicts(device)}
    assert list(events) == ["offered", "downloaded", "staged", "rolled-back"]
    verdict = events["rolled-back"]
    assert verdict["commit"] == images.v2[len("sha256:"):] and verdict["boots"] == 3
    assert verdict["from_commit"] == images.v1[len("sha256:"):]
    assert verdict["from_version"].endswith("sample.1") and \
        verdict["version"].endswith("sample.2")
    assert verdict["failed_check"].startswith("timed out after ")
    assert events["staged"]["from_version"] == verdict["from_version"]


def test_an_admins_bootc_rollback_queues_the_previous_image_and_it_boots(
        pair: UpdatePair, images: SampleImages, tmp_path: Path) -> None:
    """bootc rollback on a healthy v2: v1 boots next (rollbackQueued), v2 stays the rollback;
    a staged update is discarded by it, as bootc does."""
    device = image_device(pair, images, tmp_path)
    trust(device, images)
    v1_deployment = device.deployments()[0]
    _, v2_deployment = run_updater(device, site(images, tmp_path), UpdateOptions(config=CONFIG))
    with ApiServer() as api:
        assert boot(device, api, {}).deployment.id == v2_deployment.id
    assert bootc(device, "rollback").returncode == 0
    host = bootc_status(device)["status"]
    assert host["rollbackQueued"] and host["staged"] is None
    assert host["rollback"]["ostree"]["checksum"] == v1_deployment.checksum
    assert [d.id for d in device.deployments()] == [v1_deployment.id, v2_deployment.id]
    with ApiServer() as api:
        assert boot(device, api, {}).deployment.id == v1_deployment.id
    host = bootc_status(device)["status"]
    assert host["booted"]["image"]["imageDigest"] == images.v1 and not host["rollbackQueued"]
    assert bootc(device, "switch", "--transport", "oci", str(images.single("v2"))).returncode == 0
    assert bootc_status(device)["status"]["staged"] is not None
    assert bootc(device, "rollback").returncode == 0
    host = bootc_status(device)["status"]
    assert host["staged"] is None and host["booted"]["image"]["imageDigest"] == images.v1
    assert v1_deployment.id in [d.id for d in device.deployments()]
