"""Update scenarios on a VM that boots the pipeline's own disk image.

Every scenario: the SAMPLE bootable base; v1 and v2 composed onto it by the pipeline (v2 bad
in bad-update); a disk image of v1 whose remote is the build's published layout, served on
this machine's loopback and reached by the guest through QEMU's restricted user network;
the admin's settings in v1's /etc (greenboot's short wait, the updater's schedule, reboot
and, for lte-update, its bandwidth cap); a marker in MicroShift's data. Then the VM boots
until it settles: v1's own microshift-update stages v2 through `ostree admin deploy
--stage`, ostree-finalize-staged writes the menu at shutdown, GRUB counts the boots and
greenboot judges them under systemd. The outcome is read from the console and the disk.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from builder.baseos.bootable import ensure_bootable_base
from builder.context import Context
from builder.core.errors import BuildError
from builder.device.repo_server import RepoServer
from builder.disk.deployment import Deployment, console_karg
from builder.disk.image import build_disk
from builder.disk.layout import DEFAULT_FIRMWARE
from builder.rpm.sample_base import build_sample_base
from builder.updater.index import INDEX, parse_index
from builder.vm.boots import BootRecord, watch
from builder.vm.disk_state import DiskState
from builder.vm.firmware import ensure_vars
from builder.vm.image_mode import ImagePair, build_images, image_settings, signed_digests
from builder.vm.migration import admin_etc, image_on_device
from builder.vm.qemu import Forward, Machine, power_on, probe_accel
from builder.vm.releases import IMAGE, BuiltPair, build_pair, write_release_files

GUEST_SERVER = ("10.0.2.100", 80)   # the published layout, as the guest sees it
MARKER = "lib/microshift/marker"
MARKER_TEXT = "written on v1 before the upgrade\n"
MAX_BOOTS = 8
# A KVM boot reaches GRUB in about a second; where KVM is unusable it never does, and the
# wait is paid once per host boot (the answer is kept in DIR/vm/accel.json).
KVM_PROBE_SECONDS = 5.0
# Seconds for all boots of a scenario when none is given: twice bad-update's five TCG boots
# on a quiet 2-core machine (x86_64: 552 s; beside a test suite they took over 900 s).
# An arm64 guest on an x86_64 host is emulated by TCG instruction by instruction, with no
# help from the host's own CPU model: its boots are several times slower.
TIME_LIMITS = {"x86_64": 1200.0, "aarch64": 3600.0}


def time_limit(options: VmOptions, arch: str) -> float:
    return options.time_limit or TIME_LIMITS.get(arch, TIME_LIMITS["x86_64"])


@dataclass(frozen=True)
class VmScenario:
    name: str
    description: str
    bad_v2: bool = False
    cuts: int = 0          # the server drops the delta file's transfer this many times
    cap: int = 0           # update.yaml max_bytes_per_second (0: none)
    migrate: bool = False  # no update: an admin switches to v1's image and back


VM_SCENARIOS = {s.name: s for s in (
    VmScenario("good-update", "v1 -> v2, v2 is healthy: v2 stays"),
    VmScenario("bad-update", "v2's MicroShift API never becomes ready: GRUB counts down the "
               "boots, back to v1 with its data", bad_v2=True),
    VmScenario("lte-update", "the updater's bandwidth cap and a link cut 3 times in the delta "
               "file: each cut resumes, v2 is staged and boots", cuts=3, cap=32 * 1024),
    VmScenario("migrate", "installed from the ostree commit v1, switched by bootc to v1's "
               "image with /etc and data kept, then rolled back to the commit", migrate=True),
)}


@dataclass(frozen=True)
class VmOptions:
    work: Path
    accel: str = "auto"          # auto, kvm or tcg
    wait_timeout: int = 15       # MICROSHIFT_WAIT_TIMEOUT_SEC in the guest
    max_boot_attempts: int = 3
    time_limit: float | None = None    # seconds for all boots (None: the arch's TIME_LIMITS)
    mirror: str | None = None
    firmware: str = DEFAULT_FIRMWARE   # uefi (OVMF, GPT disk with an ESP) or bios (SeaBIOS, MBR)
    mode: str = "ostree"               # ostree, or image: a bootc device (builder/vm/image_mode.py)
    # uefi: the commit's signed shim and GRUB on the ESP, OVMF enforcing Secure Boot
    secure_boot: bool = False

    @property
    def boots_with(self) -> str:
        """The firmware, and Secure Boot when it is on: the run's and disk's names."""
        return self.firmware + ("-secureboot" if self.secure_boot else "")


@dataclass(frozen=True)
class FinalState:
    """The disk after the last boot."""

    deployments: list[str] = field(default_factory=list)
    grubenv: dict[str, str] = field(default_factory=dict)
    data_version: str | None = None
    marker: str | None = None


@dataclass
class VmOutcome:
    scenario: str
    firmware: str = DEFAULT_FIRMWARE
    secure_boot: bool = False
    mode: str = "ostree"
    accel: str = ""
    accel_reason: str = ""
    pair: BuiltPair | None = None
    boots: list[BootRecord] = field(default_factory=list)
    checks: list[tuple[str, bool]] = field(default_factory=list)
    final: FinalState = field(default_factory=FinalState)
    served: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    images: ImagePair | None = None   # image mode: the releases' images
    migration: ImagePair | None = None   # migrate: the images the admin switches to

    def booted(self, boot: BootRecord) -> str | None:
        """What a boot ran: its commit, or in image mode its image's manifest digest."""
        return boot.commit if self.images is None else boot.image

    def expect(self, what: str, ok: bool) -> None:
        self.checks.append((what, ok))

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(ok for _, ok in self.checks)


def prepare(ctx: Context, scenario: VmScenario, options: VmOptions) -> BuiltPair:
    """The bootable base (DIR/baseos, shared), then v1 and v2 in WORK/build."""
    build_sample_base(ctx)
    base = ensure_bootable_base(ctx, options.mirror)
    releases = write_release_files(ctx, base, options.work / "releases", scenario.bad_v2)
    return build_pair(ctx, options.work / "build", releases)


def guest_settings(scenario: VmScenario, options: VmOptions,
                   images: ImagePair | None = None) -> dict[str, bytes]:
    """What the admin sets in v1's /etc (kept by ostree's /etc merge on v2)."""
    update = {"reboot": True, "retry_delay_seconds": 1, "timeout_seconds": 20,
              "max_bytes_per_second": scenario.cap}
    image = {} if images is None else image_settings(images, update, GUEST_SERVER[0])
    return {
        "greenboot/greenboot.conf": (
            f"GREENBOOT_MAX_BOOT_ATTEMPTS={options.max_boot_attempts}\n"
            f"MICROSHIFT_WAIT_TIMEOUT_SEC={options.wait_timeout}\n"
            "GREENBOOT_WATCHDOG_CHECK_ENABLED=false\n").encode(),
        "microshift/update.yaml": "".join(
            f"{k}: {json.dumps(v)}\n" for k, v in update.items()).encode(),
        # QEMU's restricted user network leases an address but no router; a device's LAN
        # gives one, and MicroShift takes the node IP from the default route.
        "systemd/network/80-sample-wired.network.d/10-router.conf":
            b"[Route]\nGateway=10.0.2.2\n",
        # The scenario's short wait (15 s, not MicroShift's 300) is meant for MicroShift's
        # readiness, not for how late an emulated boot starts it: upstream greenboot orders
        # its check after nothing, and under TCG MicroShift became active 18 s after the
        # check began waiting, so a healthy v1 was judged red. Ordered after MicroShift's
        # start (bounded by its TimeoutStartSec=2m, then failed and judged red), the wait
        # measures the API and the workloads.
        "systemd/system/greenboot-healthcheck.service.d/10-after-microshift.conf":
            b"[Unit]\nAfter=microshift.service\n",
        # The updater's log on the console too, where the scenario reads it.
        "systemd/system/microshift-update.service.d/10-console.conf":
            b"[Service]\nStandardOutput=journal+console\nStandardError=journal+console\n",
        **image,
    }


# Look for updates at every boot, right after greenboot's verdict (the unit is ordered after
# greenboot-healthcheck), instead of the timer's 15 minutes after boot.
GUEST_LINKS = {"systemd/system/multi-user.target.wants/microshift-update.service":
               "/usr/lib/systemd/system/microshift-update.service"}


def run_vm_scenario(ctx: Context, scenario: VmScenario, options: VmOptions) -> VmOutcome:
    outcome = VmOutcome(scenario.name, firmware=options.firmware,
                        secure_boot=options.secure_boot, mode=options.mode)
    started = time.monotonic()
    with ctx.progress.step(f"{scenario.name}: v1 and v2 on the SAMPLE bootable base"):
        pair = outcome.pair = prepare(ctx, scenario, options)
    if options.mode == "image" or scenario.migrate:
        with ctx.progress.step(f"{scenario.name}: v1 and v2 as bootc images"):
            images = build_images(ctx, pair, options.work)
        if scenario.migrate:
            outcome.migration = images
        else:
            outcome.images = images
    outcome.seconds["build"] = time.monotonic() - started
    # Each firmware's boots keep their own console logs (the test tier runs both).
    run = options.work / f"run-{options.boots_with}{'-image' if outcome.images else ''}"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    with ctx.progress.step(f"{scenario.name}: {options.boots_with} disk image of v1"):
        disk = _disk(ctx, pair, run, options, _guest_files(scenario, options, outcome),
                     images=outcome.images)
    arch = ctx.target_arch
    outcome.accel, outcome.accel_reason = probe_accel(
        disk, KVM_PROBE_SECONDS, options.accel, cache=ctx.layout.vm_accel,
        firmware=options.firmware, arch=arch)
    ctx.progress.info(f"accelerator: {outcome.accel} ({outcome.accel_reason})")
    server = RepoServer(pair.build_dir / "ostree/repo", updates=pair.build_dir / "deltas")
    with server:
        if scenario.cuts:
            server.cut_delta_at(_cut_offsets(pair, scenario.cuts, outcome.images))
        uefi = options.firmware == "uefi"
        machine = Machine(disk, accel=outcome.accel, forwards=(
            Forward(*GUEST_SERVER, int(server.url.rsplit(":", 1)[1].split("/")[0])),),
            firmware=options.firmware, arch=arch, secure_boot=options.secure_boot,
            variables=ensure_vars(disk, arch, options.secure_boot) if uefi else None)
        with ctx.progress.step(f"{scenario.name}: boot until greenboot settles"):
            _boot_until_settled(ctx, machine, run, options, outcome)
        stats = server.stats
        outcome.served = {"requests": stats.requests, "body_bytes": stats.body_bytes,
                          "cut_transfers": stats.cut_transfers,
                          "duplicate_delta_bytes": stats.duplicate_delta_bytes()}
    outcome.seconds["boots"] = sum(b.seconds for b in outcome.boots)
    outcome.seconds["total"] = time.monotonic() - started
    _final_state(ctx, disk, outcome, options.firmware)
    if outcome.images is not None:
        signed_digests(DiskState(disk, ctx.runner, firmware=options.firmware), outcome.boots)
        outcome.pair = outcome.images.as_images   # held to the images' digests
    return outcome


@dataclass(frozen=True)
class GuestFiles:
    """What the scenario puts on v1's disk besides the deployment (path -> bytes)."""

    etc: dict[str, bytes]
    etc_links: dict[str, str]
    var: dict[str, bytes]
    name: str = ""         # the disk's name suffix (.image, .migrate)


def _guest_files(scenario: VmScenario, options: VmOptions, outcome: VmOutcome) -> GuestFiles:
    var = {MARKER: MARKER_TEXT.encode()}
    if outcome.migration is not None:
        # No updater at boot: the admin's switch and rollback are the whole scenario.
        etc, links = admin_etc()
        return GuestFiles({**guest_settings(scenario, options), **etc}, links,
                          {**var, **image_on_device(outcome.migration)}, ".migrate")
    return GuestFiles(guest_settings(scenario, options, outcome.images), GUEST_LINKS, var,
                      "" if outcome.images is None else ".image")


def _disk(ctx: Context, pair: BuiltPair, run: Path, options: VmOptions, files: GuestFiles,
          *, images: ImagePair | None) -> Path:
    deployment = Deployment(
        pair.build_dir / "ostree/repo", pair.ref, pair.v1,
        remote_url=f"http://{GUEST_SERVER[0]}/repo/", gpg_key=pair.public_key,
        # Kernel messages cost emulated serial output; the journal keeps them on the disk.
        kargs=(console_karg(ctx.target_arch), "quiet"),
        etc_files=files.etc, etc_links=files.etc_links, var_files=files.var,
        image=images.source() if images is not None else None)
    mode = files.name
    image = build_disk(ctx.runner, deployment, options.work / "disk",
                       f"{IMAGE}.{ctx.target_arch}.{options.boots_with}{mode}",
                       epoch=ctx.release.source_date_epoch, qcow2=False,
                       firmware=options.firmware, arch=ctx.target_arch,
                       secure_boot=options.secure_boot)
    state = "built" if image.built else "unchanged, reused"
    ctx.progress.info(f"disk image {image.raw} ({image.size // (1 << 20)} MiB, {state})")
    disk = run / "disk.raw"
    ctx.runner.run(["cp", "--sparse=always", str(image.raw), str(disk)])
    return disk


def _cut_offsets(pair: BuiltPair, cuts: int, images: ImagePair | None) -> list[int]:
    if images is not None:
        return offsets_in(images.images.delta_file.stat().st_size, cuts)
    return cut_offsets(pair.build_dir / "deltas" / pair.ref / INDEX, pair.ref, pair.v1, cuts)


def cut_offsets(index_path: Path, ref: str, from_commit: str, cuts: int) -> list[int]:
    """Where the link drops the delta file from `from_commit`: `cuts` distinct offsets inside
    it, the same for the same count. The index is read as the device's updater reads it."""
    index = parse_index(index_path.read_bytes(), ref, str(index_path))
    delta = index.delta_from(from_commit)
    if delta is None:
        raise BuildError(f"{index_path}: no delta file from {from_commit[:12]} to cut")
    return offsets_in(delta.size, cuts)


def offsets_in(size: int, cuts: int) -> list[int]:
    """`cuts` distinct offsets inside a file of `size` bytes, the same for the same count."""
    chooser = random.Random(cuts)
    return sorted(chooser.sample(range(1, max(2, size - 1)), min(cuts, max(1, size - 2))))


def _boot_until_settled(ctx: Context, machine: Machine, run: Path, options: VmOptions,
                        outcome: VmOutcome) -> None:
    limit = time_limit(options, machine.arch)
    deadline = time.monotonic() + limit
    state = DiskState(machine.disk, ctx.runner, firmware=machine.firmware)
    for number in range(1, MAX_BOOTS + 1):
        record = BootRecord(number, serial_log=str(run / f"boot-{number}.serial"))
        with power_on(machine, Path(record.serial_log), run / "qmp.sock") as boot:
            watch(boot, record, deadline)
        record.grubenv_after = state.grubenv()
        outcome.boots.append(record)
        ctx.progress.info(
            f"boot {number}: GRUB entry {record.entry}, boot_counter {record.boot_counter}, "
            f"{(record.commit or '?')[:12]} ({record.version}), greenboot "
            f"{(record.verdict or 'no verdict').upper()}, {record.ended} after "
            f"{record.seconds:.0f}s")
        if record.ended == "time limit":
            raise BuildError(
                f"{outcome.scenario}: did not settle within {limit:.0f}s; boot "
                f"{number} stopped at:\n    " + "\n    ".join(record.last_lines[-8:]),
                hint=f"the whole console is in {record.serial_log}")
        if record.ended == "settled":
            return
    raise BuildError(f"{outcome.scenario}: the VM was still rebooting after {MAX_BOOTS} boots")


def _final_state(ctx: Context, disk: Path, outcome: VmOutcome, firmware: str) -> None:
    state = DiskState(disk, ctx.runner, firmware=firmware)
    outcome.final = FinalState(
        deployments=state.deployments(), grubenv=state.grubenv(),
        data_version=(state.var_file("lib/microshift/version") or "").strip() or None,
        marker=state.var_file(MARKER))
