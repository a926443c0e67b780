"""Staging on the device: the finalize service is started before anything may reboot, so a
staged deployment is never dropped at shutdown (the VM tier saw a reboot right after staging
lose the race with ostree-finalize-staged.path)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from builder.core.errors import ToolError
from builder.core.runner import Runner
from builder.updater.apply import FINALIZE, stage
from builder.updater.index import UpdateRefused
from builder.updater.run import Run
from builder.updater.status import StatusFile
from builder.updater.system import Booted, System
from builder.updater.update_config import parse_update_config

COMMIT = "c" * 64


LOCKED = "error: Locking repo exclusive failed: Resource temporarily unavailable\n"


class Recorder(Runner):
    """The tool-runner seam: records each command, answers the systemctl call as told, and
    `ostree admin deploy` and `status` as a device whose repository lock is taken would."""

    def __init__(self, systemctl_code: int, *, deploy_fails: bool = False,
                 default: str = "a" * 64) -> None:
        super().__init__()
        self.calls: list[list[str]] = []
        self.systemctl_code = systemctl_code
        self.deploy_fails = deploy_fails
        self.default = default   # what `ostree admin status` lists first

    def run(self, argv: Sequence[Any], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        args = [str(a) for a in argv]
        self.calls.append(args)
        if args[:3] == ["ostree", "admin", "status"]:
            return subprocess.CompletedProcess(args, 0, f"* rhel {self.default}.0\n".encode(),
                                               b"")
        if args[:3] == ["ostree", "admin", "deploy"] and self.deploy_fails:
            raise ToolError(args, 1, LOCKED)
        code = self.systemctl_code if args[0] == "systemctl" else 0
        stderr = b"Unit ostree-finalize-staged.service not found.\n" if code else b""
        if code and kwargs.get("check", True):
            raise ToolError(args, code, stderr.decode())
        return subprocess.CompletedProcess(args, code, b"", stderr)


BOOTED = Booted(COMMIT, "rhel", "edge", "microshift/x86_64/microshift-minimal", Path("/x"))


def test_on_the_device_the_finalize_service_runs_before_staging_returns() -> None:
    runner = Recorder(0)
    stage(System(Path("/"), runner), BOOTED, "edge", COMMIT, print)
    programs = [c[:3] for c in runner.calls]
    assert programs == [["ostree", "--repo=/ostree/repo", "refs"],
                        ["ostree", "admin", "deploy"], ["systemctl", "start", FINALIZE]]
    assert "--stage" in runner.calls[1]


def test_a_finalize_service_that_cannot_start_fails_the_update() -> None:
    with pytest.raises(UpdateRefused, match=r"service not found\.: the staged deployment "
                                            r"would be dropped at shutdown"):
        stage(System(Path("/"), Recorder(5)), BOOTED, "edge", COMMIT, print)


def test_the_simulation_deploys_at_once_without_systemd(tmp_path: Path) -> None:
    runner = Recorder(0)
    stage(System(tmp_path, runner), BOOTED, "edge", COMMIT, print)
    assert not any(c[0] == "systemctl" for c in runner.calls)
    assert "--stage" not in runner.calls[1]


def test_a_deploy_that_fails_before_the_deployment_exists_names_ostree_s_reason(
        tmp_path: Path) -> None:
    runner = Recorder(0, deploy_fails=True)
    with pytest.raises(UpdateRefused) as caught:
        stage(System(tmp_path, runner), BOOTED, "edge", COMMIT, print)
    assert str(caught.value).startswith(
        "ostree admin deploy failed: Locking repo exclusive failed: Resource temporarily "
        "unavailable; ")
    assert "hint: nothing was staged" in str(caught.value)


def test_a_deploy_that_failed_after_making_the_deployment_the_default_staged_it(
        tmp_path: Path) -> None:
    """What counts is `ostree admin status`: the run reported a failure while the device
    would boot the new deployment (issue 42)."""
    lines: list[str] = []
    runner = Recorder(0, deploy_fails=True, default=COMMIT)
    stage(System(tmp_path, runner), BOOTED, "edge", COMMIT, lines.append)
    assert len(lines) == 1 and lines[0].startswith(
        "ostree admin deploy failed: Locking repo exclusive failed")
    assert lines[0].endswith(f"`ostree admin status` shows {COMMIT[:12]} as the next "
                             "deployment: it is staged")


@pytest.mark.parametrize(("next_deployment", "reboots"), [("a" * 64, True), (COMMIT, False)])
def test_reboot_true_reboots_only_into_another_deployment(
        tmp_path: Path, next_deployment: str, reboots: bool) -> None:
    """A run told to reboot whose next deployment is the booted one (nothing was staged
    after all) does not reboot: rebooting into what runs, on every timer run, was a loop."""
    runner = Recorder(0, default=next_deployment)
    state = tmp_path / "state"
    state.mkdir()
    run = Run(tmp_path, parse_update_config({"reboot": True}, "update.yaml"), runner,
              StatusFile(state / "status.json"), print)
    run._maybe_reboot(BOOTED)
    assert run.rebooted is reboots
    assert (["systemctl", "reboot"] in runner.calls) is reboots
