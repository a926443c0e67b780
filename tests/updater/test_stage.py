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
from builder.updater.system import Booted, System

COMMIT = "c" * 64


class Recorder(Runner):
    """The tool-runner seam: records each command, answers the systemctl call as told."""

    def __init__(self, systemctl_code: int) -> None:
        super().__init__()
        self.calls: list[list[str]] = []
        self.systemctl_code = systemctl_code

    def run(self, argv: Sequence[Any], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        args = [str(a) for a in argv]
        self.calls.append(args)
        code = self.systemctl_code if args[0] == "systemctl" else 0
        stderr = b"Unit ostree-finalize-staged.service not found.\n" if code else b""
        if code and kwargs.get("check", True):
            raise ToolError(args, code, stderr.decode())
        return subprocess.CompletedProcess(args, code, b"", stderr)


BOOTED = Booted(COMMIT, "rhel", "edge", "microshift/x86_64/microshift-minimal", Path("/x"))


def test_on_the_device_the_finalize_service_runs_before_staging_returns() -> None:
    runner = Recorder(0)
    stage(System(Path("/"), runner), BOOTED, "edge", COMMIT)
    programs = [c[:3] for c in runner.calls]
    assert programs == [["ostree", "--repo=/ostree/repo", "refs"],
                        ["ostree", "admin", "deploy"], ["systemctl", "start", FINALIZE]]
    assert "--stage" in runner.calls[1]


def test_a_finalize_service_that_cannot_start_fails_the_update() -> None:
    with pytest.raises(UpdateRefused, match=r"service not found\.: the staged deployment "
                                            r"would be dropped at shutdown"):
        stage(System(Path("/"), Recorder(5)), BOOTED, "edge", COMMIT)


def test_the_simulation_deploys_at_once_without_systemd(tmp_path: Path) -> None:
    runner = Recorder(0)
    stage(System(tmp_path, runner), BOOTED, "edge", COMMIT)
    assert not any(c[0] == "systemctl" for c in runner.calls)
    assert "--stage" not in runner.calls[1]
