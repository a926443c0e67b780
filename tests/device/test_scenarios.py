"""The simulated device: real ostree sysroots, the shipped greenboot scripts, update scenarios.

Integration tier: runs ostree, bash, curl and jq; the throttled-link test also needs network
namespaces (root) and is skipped with the reason where they are not allowed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from builder.context import Context
from builder.core.errors import BuildError
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.device.commits import SAMPLE_REF, UpdatePair, build_sample_pair
from builder.device.netlink import netns_unavailable_reason
from builder.device.scenarios import SCENARIOS, SimOptions, run_scenario
from builder.device.sysroot import Device, LinkOptions
from tests.support import requires
from tests.support.cli import RELEASE, run_cli
from tests.support.ostree import ComposedPair

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("deletable_sysroots")]
# Booting runs the component plugins in a network namespace with br-ex.
BOOTS = requires.root_only("booting the simulated device makes a network namespace")

SCENARIO_NAMES = ("good-update", "bad-update", "slow-update", "interrupted-pull", "lte-update")


def make_ctx(build_dir: Path) -> Context:
    return Context(build_dir=build_dir, release_path=RELEASE, progress=Progress())


@pytest.fixture(scope="module")
def sample_pair(tmp_path_factory: pytest.TempPathFactory) -> UpdatePair:
    build = tmp_path_factory.mktemp("device-commits")
    return build_sample_pair(make_ctx(build), build / "repo", 64 * 1024)


@BOOTS
@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_scenario_passes_via_the_cli(tmp_path: Path, scenario: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "outcome.json"
    rc = run_cli("--release", RELEASE, "device", "simulate", "--scenario", scenario,
                 "--build-dir", tmp_path, "--report-json", report, "--wait-timeout", "1")
    out = capsys.readouterr()
    assert rc == 0, out.err[-3000:]
    assert f"scenario {scenario}: PASSED" in out.out
    outcome = json.loads(report.read_text())
    assert outcome["passed"] and all(check["ok"] for check in outcome["checks"])
    assert "PASS: MicroShift's data marker from v1 is intact" in out.err


@BOOTS
@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_scenario_passes_as_a_library_call(tmp_path: Path, sample_pair: UpdatePair,
                                           scenario: str) -> None:
    options = SimOptions(work_dir=tmp_path, wait_timeout=1)
    outcome = run_scenario(make_ctx(tmp_path), SCENARIOS[scenario], sample_pair, options)
    assert outcome.passed, [what for what, ok in outcome.checks if not ok]
    final = outcome.boots[-1].deployment.checksum
    assert final == (sample_pair.v1 if scenario == "bad-update" else sample_pair.v2)
    if scenario == "bad-update":
        assert [b.healthy for b in outcome.boots] == [False, False, False, True]
    if scenario == "interrupted-pull":
        assert outcome.failed_pull is not None


@BOOTS
def test_boot_with_a_crashlooping_component_runs_red_d(tmp_path: Path,
                                                       sample_pair: UpdatePair,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    sysroot = tmp_path / "device"
    assert run_cli("device", "init", "--sysroot", sysroot) == 0
    assert run_cli("device", "install", "--sysroot", sysroot, "--repo", sample_pair.repo,
                   "--ref", SAMPLE_REF, "--wait-timeout", "1") == 0
    rc = run_cli("device", "boot", "--sysroot", sysroot,
                 "--health", "crashloop:openshift-ovn-kubernetes/ovnkube-master")
    err = capsys.readouterr().err
    assert rc == 1
    assert "daemonset openshift-ovn-kubernetes/ovnkube-master is ready" in err
    assert "script '40-microshift-pre-rollback.sh' SUCCESS" in err
    # Not an upgrade (no boot counter): greenboot does not reboot, a person must look.
    assert "boot_counter is unset: manual intervention necessary" in err
    assert run_cli("device", "status", "--sysroot", sysroot) == 0
    out = capsys.readouterr().out
    assert f"0 default  4.14.2-sample.2 ({sample_pair.v2[:12]})" in out
    assert "grubenv: {'boot_success': '0'}" in out  # never marked healthy
    assert "backups: diagnostics" in out


@BOOTS
def test_boot_runs_the_components_unit_and_microshift_applies_its_kustomization(
        tmp_path: Path, sample_pair: UpdatePair, capsys: pytest.CaptureFixture[str]) -> None:
    sysroot = tmp_path / "device"
    assert run_cli("device", "init", "--sysroot", sysroot) == 0
    assert run_cli("device", "install", "--sysroot", sysroot, "--repo", sample_pair.repo,
                   "--ref", SAMPLE_REF, "--wait-timeout", "1") == 0
    assert run_cli("device", "boot", "--sysroot", sysroot) == 0
    err = capsys.readouterr().err
    # The real OVN-Kubernetes plugin ran in the unit; MicroShift applied what it printed
    # (kubectl kustomize through core's manifests.d link): core's 4 workloads + OVN-K's 2.
    assert "[microshift-components.service]     13 objects from 1 component plugins" in err
    assert "microshift: started, 6 workloads" in err
    assert "ok: daemonset openshift-ovn-kubernetes/ovnkube-node is ready" in err

    [etc] = sysroot.glob("ostree/deploy/edge/deploy/*.0/etc")
    (etc / "microshift/ovn.yaml").write_text("mtu: 99999\n")  # an admin's mistake
    assert run_cli("device", "boot", "--sysroot", sysroot) == 1
    err = capsys.readouterr().err
    assert "microshift-components.service: FAILED (exit 2)" in err
    assert "microshift.service: not started, dependency microshift-components.service" in err
    # greenboot's check fails at once and says which plugin failed and why.
    assert "[40-microshift-running-check.sh] microshift-components.service failed" in err
    assert "plugin 005-networking-ovnk failed with exit code 2: its configuration is wrong" \
        in err
    assert "mtu: 99999 is out of range" in err


def test_cli_upgrade_arms_the_boot_counter(tmp_path: Path, sample_pair: UpdatePair,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    sysroot = tmp_path / "device"
    assert run_cli("device", "init", "--sysroot", sysroot) == 0
    assert run_cli("device", "install", "--sysroot", sysroot, "--repo", sample_pair.repo,
                   "--ref", SAMPLE_REF, "--commit", sample_pair.v1,
                   "--max-boot-attempts", "2") == 0
    assert run_cli("device", "upgrade", "--sysroot", sysroot, "--repo", sample_pair.repo,
                   "--method", "pull") == 0
    device = Device(sysroot, Runner(), Progress())
    assert [d.checksum for d in device.deployments()] == [sample_pair.v2, sample_pair.v1]
    assert device.grubenv.read() == {"boot_counter": "2", "boot_success": "0"}
    assert "1 delta parts" in capsys.readouterr().err


def test_throttled_upgrade_takes_bytes_over_rate_plus_latency(tmp_path: Path) -> None:
    runner = Runner()
    requires.need_root("network namespaces")
    requires.need_tools("ip", "tc")
    reason = netns_unavailable_reason(runner)
    if reason:
        pytest.skip(f"{requires.NO_NETNS}: {reason}")
    ctx = make_ctx(tmp_path)
    pair = build_sample_pair(ctx, tmp_path / "repo", 1024 * 1024)
    device = Device(tmp_path / "device", runner, ctx.progress)
    device.init("edge")
    device.install(pair.repo, pair.ref, commit=pair.v1)
    report, deployment = device.upgrade(pair.repo, LinkOptions(rate_kbit=5000, latency=0.05))
    assert deployment.checksum == pair.v2
    expected = report.expected_seconds()
    assert expected is not None and report.wire_bytes is not None
    assert report.wire_bytes > report.body_bytes > 1024 * 1024  # headers and frames on top
    assert report.delta_bytes is not None and report.delta_bytes > 1024 * 1024
    # The link must really be throttled: never faster than bytes / rate (a loaded machine
    # only makes it slower). How close to bytes / rate it comes is the benchmark's
    # (`python -m bench ota`, docs/benchmarks.md), not a test's: no timing ratio here.
    assert report.seconds >= expected / 1.3, report.text()


@pytest.mark.parametrize(("argv", "message"), [
    (["device", "boot", "--sysroot", "{tmp}"], "not a simulated device"),
    (["device", "upgrade", "--sysroot", "{tmp}", "--repo", "{tmp}"],
     "not an ostree repository"),
    (["device", "simulate", "--scenario", "good-update", "--build-dir", "{tmp}",
      "--rate", "fast"], "'fast' is not a link rate"),
    (["device", "boot", "--sysroot", "{tmp}", "--health", "sometimes"],
     "not a simulated device"),
])
def test_bad_input_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     argv: list[str], message: str) -> None:
    rc = run_cli(*[a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err
    assert "Traceback" not in err


def test_init_refuses_a_directory_that_is_not_empty(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "something").write_text("data")
    assert run_cli("device", "init", "--sysroot", tmp_path) == 2
    assert "directory is not empty" in capsys.readouterr().err


@BOOTS
def test_simulate_takes_composed_commits_when_the_repo_has_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A compose-like published repo: DIR/ostree/repo with one ref whose head has a parent.
    build_sample_pair(make_ctx(tmp_path), tmp_path / "ostree/repo", 16 * 1024)
    rc = run_cli("--release", RELEASE, "device", "simulate", "--scenario", "good-update",
                 "--build-dir", tmp_path, "--ref", SAMPLE_REF)
    captured = capsys.readouterr()
    assert rc == 0, captured.err[-2000:]
    assert f"compose commits on {SAMPLE_REF}" in captured.err


def test_good_update_between_labelled_compose_commits(
        tmp_path: Path, composed_pair: ComposedPair, capsys: pytest.CaptureFixture[str]) -> None:
    # The compose's commits carry SELinux labels and a policy: ostree deploys them into the
    # plain-directory sysroot with their labels, and on the upgrade it runs the new
    # deployment's (SAMPLE) semodule through bubblewrap to refresh the policy.
    build = tmp_path / "build"
    (build / "ostree").mkdir(parents=True)
    (build / "ostree" / "repo").symlink_to(composed_pair.repo)
    work = tmp_path / "sim"
    rc = run_cli("--release", composed_pair.release2, "device", "simulate", "--scenario",
                 "good-update", "--build-dir", build, "--ref", composed_pair.ref,
                 "--work-dir", work, "--wait-timeout", "1")
    captured = capsys.readouterr()
    assert rc == 0, captured.err[-3000:]
    assert f"compose commits on {composed_pair.ref}" in captured.err
    deploy = work / "device/ostree/deploy/edge/deploy"
    [v2] = [d for d in deploy.glob(f"{composed_pair.commit2}.*") if d.is_dir()]
    label = os.getxattr(v2 / "usr/bin/microshift", "security.selinux").rstrip(b"\0")
    assert label == b"system_u:object_r:kubelet_exec_t:s0"


def test_upgrade_to_a_labelled_commit_without_bubblewrap_is_one_clear_error(
        tmp_path: Path, composed_pair: ComposedPair) -> None:
    device = Device(tmp_path / "device", Runner(), Progress())
    device.init("edge")
    device.install(composed_pair.repo, composed_pair.ref, commit=composed_pair.commit1)
    device.bwrap = tmp_path / "no-bwrap"
    with pytest.raises(BuildError) as info:
        device.upgrade(composed_pair.repo, LinkOptions())
    assert "carries an SELinux policy" in info.value.message
    assert "install bubblewrap" in str(info.value)
    assert [d.checksum for d in device.deployments()] == [composed_pair.commit1]


def test_install_retried_with_another_repo_pulls_from_that_repo(
        tmp_path: Path, sample_pair: UpdatePair) -> None:
    sysroot = tmp_path / "device"
    empty = tmp_path / "empty-repo"
    subprocess.run(["ostree", f"--repo={empty}", "init", "--mode=archive"], check=True)
    assert run_cli("device", "init", "--sysroot", sysroot) == 0
    assert run_cli("device", "install", "--sysroot", sysroot, "--repo", empty,
                   "--ref", SAMPLE_REF) == 1
    assert run_cli("device", "install", "--sysroot", sysroot, "--repo", sample_pair.repo,
                   "--ref", SAMPLE_REF, "--commit", sample_pair.v1) == 0
    device = Device(sysroot, Runner(), Progress())
    assert [d.checksum for d in device.deployments()] == [sample_pair.v1]


def _foreign_commit(repo: Path, tree: Path, version: str) -> str:
    """A deployable commit with an SELinux policy whose semodule is a riscv64 program, which
    no machine here runs (no CI runner is riscv64, and qemu's handler is not registered)."""
    for path, data in {
            "usr/lib/modules/5.14.0-1.riscv64/vmlinuz": b"SAMPLE kernel\n",
            "usr/lib/os-release": b'ID=sample\nPRETTY_NAME="SAMPLE riscv64"\n',
            "usr/etc/selinux/config": b"SELINUX=enforcing\nSELINUXTYPE=targeted\n",
            "usr/etc/selinux/targeted/contexts/files/file_contexts":
                b"/.*\tsystem_u:object_r:default_t:s0\n",
            "usr/etc/selinux/targeted/policy/policy.33": b"SAMPLE policy\n",
            # An ELF header: 64-bit, little-endian, executable, e_machine 243 (RISC-V).
            "usr/sbin/semodule": b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x02\x00\xf3\x00"
                                 + bytes(44),
            "usr/share/version": version.encode()}.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_bytes(data)
    return subprocess.run(["ostree", f"--repo={repo}", "commit", "--branch=sample/riscv64",
                           f"--add-metadata-string=version={version}", str(tree)],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_an_upgrade_whose_programs_this_machine_cannot_run_is_one_clear_error(
        tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    subprocess.run(["ostree", "init", "--mode=archive", f"--repo={repo}"], check=True)
    v1 = _foreign_commit(repo, tmp_path / "tree", "1")
    device = Device(tmp_path / "device", Runner(), Progress())
    device.init("edge")
    device.install(repo, "sample/riscv64", commit=v1)  # a first deploy runs none of them
    _foreign_commit(repo, tmp_path / "tree", "2")
    with pytest.raises(BuildError) as info:
        device.upgrade(repo, LinkOptions())
    assert info.value.message == (
        f"edge:sample/riscv64 is built for riscv64, which this {os.uname().machine} machine "
        "cannot run: ostree runs the new deployment's semodule on every upgrade")
    assert info.value.hint == ("install qemu-user-static and register its riscv64 binfmt "
                               "handler (ci/install-host-tools.sh does both)")
    assert [d.checksum for d in device.deployments()] == [v1]
