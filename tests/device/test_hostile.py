"""The shipped updater against hostile servers, damaged state and crafted input (issue 42):
every wait ends within its bound and the status names what timed out; an unchanged site
stages and reboots nothing, however often the timer fires; a run's ostree dies with it; a
damaged state file stops updates until `reset-state`; a signed index nested 200,000 levels
deep or with a field of the wrong type is one line. The device keeps its commit each time.

Integration tier: the zip application from the booted deployment, real ostree and gpg, the
published site served over HTTP by a server that turns hostile where a test says.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from builder.device.commits import SAMPLE_REF, UpdatePair
from builder.device.sysroot import Device
from builder.device.updater_run import (
    UPDATER,
    UpdateFailed,
    UpdateOptions,
    UpdateReport,
    run_updater,
)
from builder.publish.offline import INDEX, offline_name
from tests.device.site import SIM, booted_device, sign_index, site, status, updates
from tests.support import requires

pytestmark = [pytest.mark.integration,
              requires.root_only("booting the simulated device makes a network namespace"),
              pytest.mark.usefixtures("deletable_sysroots")]

FAST = {**SIM, "timeout_seconds": 2, "retries": 1}
STATE = "lib/microshift-update"


def _fails(device: Device, repo: Path, options: UpdateOptions) -> UpdateReport:
    """The run fails; the device has what it had, and no scratch file is left."""
    before = [d.id for d in device.deployments()]
    with pytest.raises(UpdateFailed) as caught:
        run_updater(device, repo, options)
    assert [d.id for d in device.deployments()] == before
    scratch = device.stateroot_var / STATE / "tmp"
    assert not scratch.exists() or not list(scratch.iterdir())
    return caught.value.report


@pytest.mark.parametrize(("path", "how", "words"), [
    (r"/index\.json$", "dribble", " bytes in 2 s, under 1000 bytes per second "
                                  "(low_speed_bytes_per_second)"),
    (r"/index\.json$", "slow-headers", "index.json: no complete answer within 2 s "
                                       "(timeout_seconds)"),
    (r"/index\.json$", "endless", "index.json is larger than 1048576 bytes"),
    (r"/timestamp\.json$", "dribble", "timestamp.json: "),
    (r"/index\.json\.sig$", "slow-headers", "index.json.sig: no complete answer"),
])
def test_a_server_slow_on_metadata_cannot_hold_the_device(
        pair: UpdatePair, tmp_path: Path, path: str, how: str, words: str) -> None:
    device = booted_device(pair, tmp_path)
    report = _fails(device, pair.repo, UpdateOptions(config=FAST,
                                                     hostile=((path, how, 0.5),)))
    assert report.seconds < 30
    assert words in status(device) and status(device).startswith("failed: ")
    assert not device.repo.has_commit(pair.v2)


def test_a_dribbled_delta_file_is_cut_and_the_next_run_resumes(pair: UpdatePair,
                                                               tmp_path: Path) -> None:
    device = booted_device(pair, tmp_path)
    report = _fails(device, pair.repo, UpdateOptions(
        config=FAST, hostile=((r"\.delta$", "dribble", 0.5),)))
    assert report.seconds < 30
    assert "cut 2 times" in status(device)
    assert "under 1000 bytes per second (low_speed_bytes_per_second)" in status(device)
    again, deployment = run_updater(device, pair.repo, UpdateOptions(config=SIM))
    assert deployment.checksum == pair.v2 and again.method == "delta-file"


def test_the_run_deadline_ends_what_no_other_bound_would(pair: UpdatePair,
                                                         tmp_path: Path) -> None:
    """A byte every half second is never silent for timeout_seconds; with no low-speed
    bound only the run's deadline ends it, saying what it was doing."""
    device = booted_device(pair, tmp_path)
    started = time.monotonic()
    _fails(device, pair.repo, UpdateOptions(
        config={**FAST, "low_speed_bytes_per_second": 0, "run_deadline_seconds": 10},
        hostile=((r"\.delta$", "dribble", 0.5),)))
    assert time.monotonic() - started < 40
    line = status(device)
    assert line.startswith("failed: the run's deadline (run_deadline_seconds) passed while "
                           "fetching http://") and "bytes staged" in line


def test_a_404_on_the_delta_file_is_refused_not_retried(pair: UpdatePair,
                                                        tmp_path: Path) -> None:
    device = booted_device(pair, tmp_path)
    report = _fails(device, pair.repo, UpdateOptions(
        config={**SIM, "retries": 10}, hostile=((r"\.delta$", "404", 0),)))
    delta = offline_name(pair.v1, pair.v2)
    assert f"{delta}: HTTP 404" in status(device)
    assert report.resumed == 0 and report.requests == 5  # index, statement, both signatures


def test_a_pull_whose_delta_parts_dribble_ends_at_its_bounds(pair: UpdatePair,
                                                             tmp_path: Path) -> None:
    """No index: the updater pulls through its relay, which cuts each dribbled request at
    the low-speed bound; ostree gives up after its retries and the device stays."""
    repo = site(pair, tmp_path)
    shutil.rmtree(repo.parent / "updates")
    device = booted_device(pair, tmp_path)
    report = _fails(device, repo, UpdateOptions(
        config=FAST, hostile=((r"^/repo/(deltas|objects)/", "dribble", 0.5),)))
    assert report.seconds < 120
    assert status(device).startswith("failed: ostree pull edge:")


def test_an_unchanged_site_stages_nothing_and_never_reboots(pair: UpdatePair,
                                                            tmp_path: Path) -> None:
    """No index, the summary names the commit the device runs, reboot: true: ten timer
    runs stage nothing and reboot never (each once re-staged it and rebooted)."""
    repo = site(pair, tmp_path)
    shutil.rmtree(repo.parent / "updates")
    device = booted_device(pair, tmp_path, commit=pair.v2)
    reboot = device.state_dir / "root/run/device-sim/reboot-requested"
    for _ in range(10):
        _report, deployment = run_updater(device, repo, UpdateOptions(
            config={**SIM, "reboot": True}))
        assert deployment.checksum == pair.v2
        assert "up to date" in status(device)
    assert [d.checksum for d in device.deployments()] == [pair.v2]
    assert not reboot.exists()


def test_a_killed_run_leaves_no_ostree_behind(pair: UpdatePair, tmp_path: Path) -> None:
    """SIGKILL while `ostree pull` runs: the kernel kills the pull with the updater
    (setpriv --pdeathsig), so no orphan holds the repository's lock for the next run."""
    repo = site(pair, tmp_path)
    shutil.rmtree(repo.parent / "updates")
    device = booted_device(pair, tmp_path)
    options = UpdateOptions(config={**SIM, "timeout_seconds": 60},
                            hostile=((r"^/repo/(deltas|objects)/", "dribble", 1.0),))
    killed = _kill_during_pull(device, repo, options, signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    assert _ostree_pulls(device) == []


def test_sigterm_ends_a_run_with_one_line_and_its_children(pair: UpdatePair,
                                                           tmp_path: Path) -> None:
    repo = site(pair, tmp_path)
    shutil.rmtree(repo.parent / "updates")
    device = booted_device(pair, tmp_path)
    options = UpdateOptions(config={**SIM, "timeout_seconds": 60},
                            hostile=((r"^/repo/(deltas|objects)/", "dribble", 1.0),))
    stopped = _kill_during_pull(device, repo, options, signal.SIGTERM)
    assert stopped.returncode == 143
    assert _ostree_pulls(device) == []
    assert status(device).startswith("failed: terminated (SIGTERM): the run stopped; the "
                                      "next run resumes")
    assert [d.checksum for d in device.deployments()] == [pair.v1]


def _kill_during_pull(device: Device, repo: Path, options: UpdateOptions,
                      signum: int) -> subprocess.CompletedProcess[bytes]:
    """Run the updater in a thread; once its ostree pull runs, signal the updater."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(run_updater(device, repo, options))
        except UpdateFailed as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 60
    while not _ostree_pulls(device):
        assert time.monotonic() < deadline, "the updater never started its pull"
        time.sleep(0.2)
    updater = _processes(str(device.state_dir / "root" / UPDATER))
    assert updater, "the updater is not running"
    os.kill(updater[0], signum)
    thread.join(timeout=60)
    assert not thread.is_alive()
    time.sleep(1)   # the kernel's death signal is immediate; leave it a moment all the same
    failed = outcome[0]
    assert isinstance(failed, UpdateFailed)
    return subprocess.CompletedProcess([], failed.report.exit_code)


def _ostree_pulls(device: Device) -> list[int]:
    return [pid for pid in _processes(f"--repo={device.repo.path}") if _is_pull(pid)]


def _is_pull(pid: int) -> bool:
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(words) and words[0].endswith(b"ostree") and b"pull" in words


def _processes(needle: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            text = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in text and " -m pytest" not in text:
            found.append(int(proc.name))
    return found


def test_a_stale_pull_holding_the_repository_lock_is_named(pair: UpdatePair,
                                                           tmp_path: Path) -> None:
    """An `ostree pull` left by something else holds the repository's lock: the run says
    which process holds it, and its outcome is what `ostree admin status` shows."""
    device = booted_device(pair, tmp_path)
    repo_path = device.repo.path
    subprocess.run(["ostree", f"--repo={repo_path}", "config", "set", "core.lock-timeout-secs",
                    "2"], check=True)
    holder = subprocess.Popen(["python3", "-c", LOCK_HOLDER, str(repo_path / ".lock")],
                              stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        try:
            report, deployment = run_updater(device, pair.repo, UpdateOptions(config=SIM))
        except UpdateFailed:
            line = status(device)
            assert "lock" in line and f"pid {holder.pid} (python3 -c " in line, line
            assert [d.checksum for d in device.deployments()] == [pair.v1]
        else:
            # ostree made the deployment before its cleanup failed on the lock: staged.
            assert deployment.checksum == pair.v2 and status(device).startswith("staged")
            assert any(f"pid {holder.pid}" in line for line in report.log)
    finally:
        holder.kill()
        holder.wait()


# Holds an exclusive OFD lock on the repository's lock file, as ostree itself locks it.
LOCK_HOLDER = """import fcntl, os, struct, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.fcntl(fd, 37, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0))  # F_OFD_SETLK
print("locked", flush=True)
time.sleep(600)
"""


def test_damaged_state_refuses_updates_until_reset(pair: UpdatePair, tmp_path: Path) -> None:
    """accepted-index.json cut short (power loss): read as empty, a replayed older statement
    would be accepted. It stops updates, kept aside, until an admin runs reset-state."""
    device = booted_device(pair, tmp_path)
    state = device.stateroot_var / STATE
    state.mkdir(parents=True, exist_ok=True)
    (state / "accepted-index.json").write_text('{"' + SAMPLE_REF + '": {"index_sha2')
    for _ in range(2):
        _fails(device, pair.repo, UpdateOptions(config=SIM))
        line = status(device)
        assert line.startswith("failed: ") and "accepted-index.json is damaged" in line, line
        assert "microshift-update reset-state" in line
        assert not device.repo.has_commit(pair.v2)
    assert [p.name.split(".damaged-")[0] for p in state.glob("*.damaged-*")] == \
        ["accepted-index.json"]
    root = device.state_dir / "root"
    reset = subprocess.run([root / UPDATER, "--root", root, "reset-state"], capture_output=True,
                           text=True, check=True)
    assert "updates run again at the next run" in reset.stdout
    _, deployment = run_updater(device, pair.repo, UpdateOptions(config=SIM))
    assert deployment.checksum == pair.v2


@pytest.mark.parametrize(("document", "words"), [
    ("deep", "index.json: is nested 200000 levels deep; allowed: at most 16"),
    ("object-version", "index.json: to_version is an object; allowed: a string or null"),
])
def test_a_signed_but_crafted_index_is_one_line(pair: UpdatePair, tmp_path: Path,
                                                document: str, words: str) -> None:
    repo = site(pair, tmp_path)
    index = updates(repo) / INDEX
    if document == "deep":
        index.write_bytes(b"[" * 200_000 + b"]" * 200_000)
    else:
        data = json.loads(index.read_text())
        index.write_text(json.dumps({**data, "to_version": {"major": 4}}))
    sign_index(pair, index)
    device = booted_device(pair, tmp_path)
    report = _fails(device, repo, UpdateOptions(config=SIM))
    line = status(device)
    assert line.startswith("failed: ") and words in line and "\n" not in line
    assert report.exit_code == 1 and "Traceback" not in " ".join(report.log)
