"""The VM tier: the pipeline's own disk image boots under QEMU and updates itself, and the
simulated sysroot (builder/device/) must repeat what real GRUB, systemd and greenboot did.

Collected only by `nox -s vm` (MSEB_VM=1): each scenario builds two releases on the SAMPLE
bootable base and boots a VM 2 to 5 times (minutes under TCG). Every scenario boots the UEFI
image (OVMF, the default); bad-update boots the BIOS image too. good-update and bad-update
also boot the arm64 image (`-k aarch64`: its own base, AAVMF on QEMU's virt board, TCG on an
x86_64 host). Every scenario runs again on an image-mode (bootc) device (ids SCENARIO-image:
installed from v1's bootc image, updated by image delta, rolled back by `bootc rollback`),
whose (image, verdict, boot_counter) sequence must be the ostree device's; `-k migrate`
switches an ostree device to its release's image and back. CI runs x86_64's bad-update in
both modes.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import requires
from tests.support.cli import PROJECT_ROOT, RELEASE

pytestmark = [pytest.mark.integration,
              requires.root_only("the bootable base, the compose and the disk image")]
SCENARIOS = ("bad-update", "good-update", "lte-update")
# (scenario, firmware, arch): UEFI for all; BIOS, still offered, for the rollback; arm64
# (UEFI only) for the update and the rollback. arm64's ids do not contain x86_64's, so that
# CI's `-k bad-update-uefi` selects x86_64's alone.
RUNS = [*((s, "uefi", "x86_64") for s in SCENARIOS), ("bad-update", "bios", "x86_64"),
        ("good-update", "uefi", "aarch64"), ("bad-update", "uefi", "aarch64")]
IDS = [f"{s}-{f}" if a == "x86_64" else f"{a}-{s}" for s, f, a in RUNS]
# arm64's runs go to one xdist worker: they share its base (built there, 10 to 16 minutes).
PARAMS = [pytest.param(*run, id=name, marks=[pytest.mark.xdist_group("aarch64")]
                       if run[2] == "aarch64" else []) for run, name in zip(RUNS, IDS, strict=True)]
# bad-update's (verdict, boot_counter) per boot: v1 green, v2 red three times as GRUB counts
# down, then v1 again, green.
ROLLBACK = [("green", None), ("red", 2), ("red", 1), ("red", 0), ("green", -1)]
# Image mode: every scenario on UEFI (x86_64).
IMAGE_RUNS = SCENARIOS


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One build directory for the module: the bootable base is built once. MSEB_VM_BUILD_DIR
    names one kept between runs instead (its bases, arm64's 10 to 16 minutes, are reused).
    Under pytest-xdist (`nox -s vm` runs 2 workers: a TCG guest keeps one core busy) each
    worker has its own build directory, seeded with x86_64's base that the first worker
    builds (the others wait for it): the whole base, not a part, is what they share."""
    kept = os.environ.get("MSEB_VM_BUILD_DIR")
    if kept:
        Path(kept).mkdir(parents=True, exist_ok=True)
        return Path(kept).resolve()
    build = tmp_path_factory.mktemp("vm-tier")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = tmp_path_factory.getbasetemp().parent / "vm-base"
        shared.mkdir(exist_ok=True)
        with (shared / ".seed.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (shared / "baseos").is_dir():
                proc = builder("bootable-base", "--build-dir", shared / "build", timeout=3000)
                assert proc.returncode == 0, proc.stderr[-4000:]
                os.replace(shared / "build/baseos", shared / "baseos")
        subprocess.run(["cp", "-a", str(shared / "baseos"), str(build / "baseos")], check=True)
    return build


def builder(*args: str | Path, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "builder", "--release", str(RELEASE),
                           *map(str, args)], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=timeout, check=False)


def model_sequence(work: Path, scenario: str, report: dict[str, object]) -> list[tuple]:
    """The simulated sysroot, run on the same two commits the VM booted (in `work`)."""
    out = work / "model.json"
    proc = builder("device", "simulate", "--scenario", scenario, "--build-dir",
                   work / "build", "--release", work / "releases/v2.yaml",
                   "--work-dir", work / "model", "--report-json", out, timeout=900)
    assert out.is_file(), proc.stderr[-3000:]
    model = json.loads(out.read_text())
    assert model["first_boot"]["commit"] == report["v1"]
    return [(b["commit"], b["verdict"], b["boot_counter"])
            for b in [model["first_boot"], *model["boots"]]]


@pytest.mark.parametrize(("scenario", "firmware", "arch"), PARAMS)
def test_the_vm_scenario_passes_and_the_model_boots_the_same(build_dir: Path, scenario: str,
                                                             firmware: str, arch: str) -> None:
    report_file = build_dir / f"{scenario}-{firmware}-{arch}.json"
    # Each architecture's scenarios have their own work directory (their releases differ);
    # the build directory, and with it each architecture's bootable base, is shared.
    work = build_dir / "vm" / (scenario if arch == "x86_64" else f"{scenario}-{arch}")
    proc = builder("--arch", arch, "device", "simulate", "--vm", "--scenario", scenario,
                   "--firmware", firmware, "--build-dir", build_dir, "--work-dir", work,
                   "--report-json", report_file, timeout=1800 if arch == "x86_64" else 5400)
    assert report_file.is_file(), proc.stderr[-4000:]
    report = json.loads(report_file.read_text())
    failed = [c["check"] for c in report["checks"] if not c["ok"]]
    assert proc.returncode == 0 and failed == [], (failed, proc.stderr[-4000:])
    boots = report["boots"]
    assert report["accel"] in ("kvm", "tcg") and report["final_commit"] == boots[-1]["commit"]
    assert report["firmware"] == firmware
    assert all(Path(b["serial_log"]).is_file() and b["seconds"] > 0 for b in boots)
    if scenario == "bad-update":
        assert [(b["verdict"], b["boot_counter"]) for b in boots] == ROLLBACK
        assert report["final_commit"] == report["v1"]
        assert report["final"]["deployments"] == [report["v1"]]
        assert report["final"]["data_version"] == "4.14.2"  # v1's data, restored
    else:
        assert report["final_commit"] == report["v2"]
        assert report["final"]["data_version"] == "4.14.3"
    vm = [(b["commit"], b["verdict"], b["boot_counter"]) for b in boots]
    assert model_sequence(work, scenario, report) == vm


def labelled(sequence: list[tuple], v1: object, v2: object) -> list[tuple]:
    """A sequence with v1's and v2's ids (commits or image digests) named v1 and v2."""
    names = {v1: "v1", v2: "v2"}
    return [(names.get(what, what), *rest) for what, *rest in sequence]


@pytest.mark.parametrize("scenario", IMAGE_RUNS, ids=[f"{s}-image" for s in IMAGE_RUNS])
def test_the_image_mode_vm_scenario_boots_as_the_ostree_device_does(build_dir: Path,
                                                                    scenario: str) -> None:
    report_file = build_dir / f"{scenario}-image.json"
    # The images and the image's import into the disk and on the device add minutes.
    work = build_dir / "vm" / f"{scenario}-image"
    proc = builder("device", "simulate", "--vm", "--mode", "image", "--scenario", scenario,
                   "--build-dir", build_dir, "--work-dir", work, "--report-json", report_file,
                   timeout=3000)
    assert report_file.is_file(), proc.stderr[-4000:]
    report = json.loads(report_file.read_text())
    failed = [c["check"] for c in report["checks"] if not c["ok"]]
    assert proc.returncode == 0 and failed == [], (failed, proc.stderr[-4000:])
    boots = report["boots"]
    assert report["mode"] == "image" and report["v1"].startswith("sha256:")
    assert [b["image"] for b in boots] == [b["image"] for b in boots if b["image"]]
    vm = labelled([(b["image"], b["verdict"], b["boot_counter"]) for b in boots],
                  report["v1"], report["v2"])
    if scenario == "bad-update":
        assert vm == [(("v1",) if n in (0, 4) else ("v2",)) + step
                      for n, step in enumerate(ROLLBACK)]
        assert report["final"]["data_version"] == "4.14.2"  # v1's data, restored
        # bootc rollback keeps v2's deployment as the rollback one; v1's is the default.
        assert len(report["final"]["deployments"]) == 2
    else:
        assert [name for name, *_ in vm] == ["v1", "v2"]
        assert report["final"]["data_version"] == "4.14.3"
    commit_v1, commit_v2 = report["commits"]
    model = model_sequence(work, scenario, {"v1": commit_v1})
    assert labelled(model, commit_v1, commit_v2) == vm


def test_an_ostree_device_migrates_to_its_release_s_image_and_rolls_back(
        build_dir: Path) -> None:
    """Issue 41, item 5 (`-k migrate`): installed from the commit, switched by the device's
    bootc to the image of the same release, back by `bootc rollback`; all green."""
    report_file = build_dir / "migrate.json"
    work = build_dir / "vm" / "migrate"
    proc = builder("device", "simulate", "--vm", "--scenario", "migrate", "--build-dir",
                   build_dir, "--work-dir", work, "--report-json", report_file, timeout=3000)
    assert report_file.is_file(), proc.stderr[-4000:]
    report = json.loads(report_file.read_text())
    failed = [c["check"] for c in report["checks"] if not c["ok"]]
    assert proc.returncode == 0 and failed == [], (failed, proc.stderr[-4000:])
    v1, image = report["v1"], report["migration_image"]
    boots = [(b["commit"] == v1, b["image"], b["verdict"], b["boot_counter"])
             for b in report["boots"]]
    assert boots == [(True, None, "green", None), (False, image, "green", 2),
                     (True, None, "green", None)]
    assert report["final"]["marker"] is not None
    assert report["final"]["data_version"] == "4.14.2"


def qemu_processes(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline and (b"qemu-system" in cmdline
                                               or b"builder.vm.guest_relay" in cmdline):
                found.append(int(entry.name))
    return found


def test_a_killed_vm_scenario_leaves_no_qemu_loop_device_or_mount(build_dir: Path) -> None:
    loops_before = subprocess.run(["losetup", "--list", "--noheadings"], capture_output=True,
                                  text=True, check=True).stdout
    work = build_dir / "killed"
    process = subprocess.Popen(
        [sys.executable, "-m", "builder", "--release", str(RELEASE), "device", "simulate",
         "--vm", "--scenario", "good-update", "--build-dir", str(build_dir),
         "--work-dir", str(work)], cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 900
        serial = work / "run-uefi" / "boot-1.serial"
        while not (serial.is_file() and serial.stat().st_size > 0):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(1)
        assert qemu_processes(str(work)), "the VM was not running"
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    time.sleep(5)
    assert qemu_processes(str(work)) == []
    assert subprocess.run(["losetup", "--list", "--noheadings"], capture_output=True,
                          text=True, check=True).stdout == loops_before
    assert str(build_dir) not in Path("/proc/mounts").read_text()
