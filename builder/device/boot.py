"""One boot of the simulated device: grub, greenboot, MicroShift, the shipped scripts.

The order follows a real RHEL for Edge boot:
1. grub picks the BLS entry by greenboot's counting rules (builder.device.grubenv);
2. the kernel "mounts" the deployment: DIR/.device/root becomes the booted root, with etc
   and usr from the deployment, var from the stateroot, a fresh run and boot_id;
3. greenboot-rpm-ostree-grub2-check-fallback: after a fallback boot, roll back for good
   (`bootc rollback` on an image-mode deployment);
4. microshift-data-restore.service and microshift-components.service (the deployment's own
   units and programs; the plugins run in a network namespace with br-ex, as
   microshift-ovs-init leaves a device), then MicroShift starts unless the components failed
   (its unit Requires them): it applies the kustomizations of its kustomize paths
   (builder.device.manifests, with `kubectl kustomize`), modelled by the stand-in API
   (builder.device.health_server) and its data directory;
5. greenboot-healthcheck runs the deployment's required.d and wanted.d scripts, then green.d
   (and boot_success=1) or red.d and redboot-auto-reboot's decision.

The scripts are the deployment's files, run with bash and MICROSHIFT_ROOT set to the booted
root; stand-ins for systemctl and grub2-editenv come first on PATH.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import BuildError
from builder.device.grubenv import grub_select, mark_success
from builder.device.health_server import ApiServer, Health
from builder.device.manifests import applied_workloads
from builder.device.sysroot import Deployment, Device

CHECK_DIRS = ("usr/lib/greenboot/check", "etc/greenboot/check")
GREEN_DIRS = ("usr/lib/greenboot/green.d", "etc/greenboot/green.d")
RED_DIRS = ("usr/lib/greenboot/red.d", "etc/greenboot/red.d")
RESTORE_UNIT = "microshift-data-restore.service"
COMPONENTS_UNIT = "microshift-components.service"
# The device's uplink as microshift-ovs-init leaves it: br-ex holding the node IP.
NODE_ADDRESS, GATEWAY = "192.0.2.10/24", "192.0.2.1"
SCRIPT_TIMEOUT = 3600.0
KUBECONFIG = "var/lib/microshift/resources/kubeadmin/kubeconfig"
STANDIN_DIR = Path(__file__).parent / "standins"
IMAGE_ORIGIN = "container-image-reference="   # in the .origin of a deployment bootc made

# Stand-ins the booted root's scripts find first on PATH (builder/device/standins/).
STANDINS = {name: (STANDIN_DIR / name).read_text()
            for name in ("systemctl", "grub2-editenv", "vgs", "bootc")}

@dataclass(frozen=True)
class BootReport:
    deployment: Deployment
    entry: int               # the boot menu entry grub chose (1 = rollback)
    rolled_back: bool        # the fallback service made this deployment the default
    healthy: bool
    reboot: bool             # redboot-auto-reboot reboots the device
    grubenv: dict[str, str]  # after the boot
    ovn_cleanup: bool = False  # red.d ran microshift-cleanup-data --ovn
    boot_counter: int | None = None  # GRUB's counter as it booted (after its decrement)

    def summary(self) -> str:
        verdict = "healthy (GREEN)" if self.healthy else "unhealthy (RED)"
        then = "greenboot reboots it" if self.reboot else "it stays up"
        return f"{self.deployment.label()}: {verdict}; {then}; grubenv {self.grubenv}"


def boot(device: Device, api: ApiServer, health_for: dict[str, Health]) -> BootReport:
    """Power on once. `health_for` maps deployment checksums to their MicroShift model."""
    progress = device.progress
    entries = device.deployments()
    if not entries:
        raise BuildError(f"device {device.sysroot} has no deployment to boot",
                         hint="run `device install` first")
    entry = grub_select(device.grubenv)
    counter = device.grubenv.counter()
    if entry >= len(entries):
        entry = 0  # grub's default=1 with a single entry boots the only one
    deployment = entries[entry]
    progress.info(f"grub: entry {entry} ({'rollback' if entry else 'default'}) -> "
                  f"{deployment.label()}; grubenv {device.grubenv.read()}")
    root = mount_root(device, deployment)
    env = script_env(device, root)
    rolled_back = device.grubenv.counter() == -1
    if rolled_back:
        fallback(device, deployment, env)
    run_unit(device, root, RESTORE_UNIT, env)
    with gateway_namespace(device) as netns:
        components = run_unit(device, root, COMPONENTS_UNIT, env, netns=netns)
    health = health_for.get(deployment.checksum, Health())
    start_microshift(device, root, deployment, health, api, components_failed=bool(components))
    healthy = run_scripts(device, root, CHECK_DIRS, env, strict=True)
    (root / "run/device-sim/units/greenboot-healthcheck.service.is-active").write_text(
        "active\n" if healthy else "failed\n")
    reboot = cleanup = False
    if healthy:
        run_scripts(device, root, GREEN_DIRS, env, strict=False)
        mark_success(device.grubenv)
    else:
        output: list[str] = []
        run_scripts(device, root, RED_DIRS, env, strict=False, output=output)
        cleanup = any("microshift-cleanup-data --ovn" in text for text in output)
        reboot = redboot_decision(device, len(device.deployments()))
    report = BootReport(deployment, entry, rolled_back, healthy, reboot, device.grubenv.read(),
                        ovn_cleanup=cleanup, boot_counter=counter)
    progress.info(report.summary())
    return report


def fallback(device: Device, deployment: Deployment, env: dict[str, str]) -> None:
    """greenboot-rpm-ostree-grub2-check-fallback: grub fell back, so make the deployment it
    booted the default for good and unset boot_counter. On an image-mode deployment (its
    origin names a container image) greenboot does it with `bootc rollback`, which keeps
    the failed deployment as the rollback; otherwise as rpm-ostree rollback does."""
    image = IMAGE_ORIGIN in _origin(deployment)
    device.progress.info("greenboot-rpm-ostree-grub2-check-fallback: fallback boot detected: "
                         f"rolling back to {deployment.label()}"
                         f"{' with bootc rollback' if image else ''}, unsetting boot_counter")
    if image:
        proc = device.runner.run(["bootc", "rollback"], env=env, check=False)
        _log_output(device, "bootc", proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise BuildError(f"bootc rollback failed on the fallback boot of "
                             f"{deployment.label()} (exit {proc.returncode})")
    else:
        device.rollback()
    device.grubenv.unset("boot_counter")


def _origin(deployment: Deployment) -> str:
    origin = deployment.path.with_name(deployment.path.name + ".origin")
    return origin.read_text() if origin.is_file() else ""


def mount_root(device: Device, deployment: Deployment) -> Path:
    """Compose the booted root: what ostree-prepare-root and systemd set up at boot."""
    root = device.state_dir / "root"
    if root.exists():
        shutil.rmtree(root)  # symlinks inside are removed, never followed
    root.mkdir(parents=True)
    links = {"etc": deployment.path / "etc", "usr": deployment.path / "usr",
             "var": device.stateroot_var, "sysroot": device.sysroot,
             "boot": device.sysroot / "boot"}
    for name, target in links.items():
        (root / name).symlink_to(target)
    (root / "run/device-sim/units").mkdir(parents=True)
    (root / "run/ostree-booted").touch()
    # What ostree-prepare-root reads: the kernel command line names the booted deployment.
    (root / "proc").mkdir()
    (root / "proc/cmdline").write_text(
        f"BOOT_IMAGE=(simulated) ostree=/{deployment.path.relative_to(device.sysroot)}\n")
    boot_id = root / "proc/sys/kernel/random/boot_id"
    boot_id.parent.mkdir(parents=True, exist_ok=True)
    boot_id.write_text(f"{uuid.uuid4()}\n")
    # systemd-tmpfiles: /var is not in the commit; MicroShift's state directories.
    for rel in ("var/lib/microshift", "var/lib/microshift-backups"):
        (root / rel).mkdir(mode=0o700, parents=True, exist_ok=True)
    return root


def script_env(device: Device, root: Path) -> dict[str, str]:
    bindir = device.state_dir / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    for name, text in STANDINS.items():
        path = bindir / name
        path.write_text(text)
        path.chmod(0o755)
    return {"MICROSHIFT_ROOT": str(root), "LC_ALL": "C",
            "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"}


def run_unit(device: Device, root: Path, unit: str, env: dict[str, str], *,
             netns: str | None = None) -> int | None:
    """Run a oneshot unit of the deployment: its ExecStart, if its conditions hold. Records
    its state for the systemctl stand-in; returns the failing exit code, or None."""
    path = root / "usr/lib/systemd/system" / unit
    if not path.is_file():
        device.progress.info(f"{unit}: not installed in this deployment")
        return None
    text = path.read_text()
    for condition in re.findall(r"^ConditionPathExists=(\S+)", text, re.M):
        if not (root / condition.lstrip("/")).exists():
            device.progress.info(f"{unit}: skipped, {condition} does not exist")
            return None
    state = root / "run/device-sim/units" / f"{unit}.is-active"
    for command in re.findall(r"^ExecStart=(.+)$", text, re.M):
        argv = command.split()
        argv[0] = str(root / argv[0].lstrip("/"))
        if netns is not None:
            argv = ["ip", "netns", "exec", netns, *argv]
        proc = device.runner.run(argv, env=env, check=False, timeout=SCRIPT_TIMEOUT)
        _log_output(device, unit, proc.stdout + proc.stderr)
        if proc.returncode != 0:
            device.progress.info(f"{unit}: FAILED (exit {proc.returncode})")
            state.write_text("failed\n")
            return proc.returncode
    state.write_text("active\n")
    return None


@contextmanager
def gateway_namespace(device: Device) -> Iterator[str]:
    """A network namespace whose default route is on br-ex, as on a device where
    microshift-ovs-init.service has run: the plugins' system checks look at it."""
    name = f"msb-device-{os.getpid()}"
    made = device.runner.run(["ip", "netns", "add", name], check=False)
    if made.returncode != 0:
        raise BuildError("the device simulation runs the component plugins in a network "
                         f"namespace with br-ex, and cannot create one: "
                         f"{made.stderr.decode(errors='replace').strip()}",
                         hint="run as root, with iproute2 installed")
    try:
        for step in (["link", "add", "br-ex", "type", "bridge"], ["link", "set", "br-ex", "up"],
                     ["addr", "add", NODE_ADDRESS, "dev", "br-ex"],
                     ["route", "add", "default", "via", GATEWAY]):
            device.runner.run(["ip", "-n", name, *step])
        yield name
    finally:
        device.runner.run(["ip", "netns", "del", name], check=False)


def start_microshift(device: Device, root: Path, deployment: Deployment, health: Health,
                     api: ApiServer, *, components_failed: bool = False) -> None:
    """microshift.service starts: unit state, data migration, kubeconfig, API behaviour."""
    units = root / "run/device-sim/units"
    installed = (root / "usr/lib/systemd/system/microshift.service").is_file()
    (units / "microshift.service.is-enabled").write_text("enabled\n" if installed else
                                                         "disabled\n")
    if installed and components_failed:
        # Requires=microshift-components.service: the start job fails as a dependency.
        (units / "microshift.service.is-active").write_text("inactive\n")
        api.state.microshift_started(Health(service_active=False), frozenset())
        device.progress.info(f"microshift.service: not started, dependency {COMPONENTS_UNIT} "
                             "failed")
        return
    active = installed and health.service_active
    (units / "microshift.service.is-active").write_text("active\n" if active else "failed\n")
    if not active:
        device.progress.info("microshift.service: failed to start")
        return
    data = root / "var/lib/microshift"
    version_file = data / "version"
    previous = version_file.read_text().strip() if version_file.is_file() else None
    if previous != deployment.version:
        # Like MicroShift's storage migration: the data now belongs to this version.
        version_file.write_text(deployment.version + "\n")
        device.progress.info(f"microshift: data {'created' if previous is None else 'migrated'}"
                             f" for {deployment.version}"
                             + (f" (was {previous})" if previous else ""))
    kubeconfig = root / KUBECONFIG
    kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n"
        f"    server: {api.url}\n  name: microshift\ncontexts:\n- context:\n"
        "    cluster: microshift\n    user: admin\n  name: microshift\n"
        "current-context: microshift\nusers:\n- name: admin\n  user: {}\n")
    workloads = core_workloads(root) | applied_workloads(root, device.runner)
    api.state.microshift_started(health, frozenset(workloads))
    device.progress.info(f"microshift: started, {len(workloads)} workloads; "
                         f"model: {health.describe()}")


def core_workloads(root: Path) -> set[tuple[str, str, str]]:
    """What the binary deploys itself (its embedded manifests): core's health list."""
    path = root / "usr/share/microshift/greenboot/core-healthcheck.list"
    found: set[tuple[str, str, str]] = set()
    if path.is_file():
        for line in path.read_text().splitlines():
            fields = line.split()
            if len(fields) == 3 and not fields[0].startswith("#"):
                found.add((fields[0], fields[1], fields[2]))
    return found


def run_scripts(device: Device, root: Path, dirs: tuple[str, ...], env: dict[str, str], *,
                strict: bool, output: list[str] | None = None) -> bool:
    """greenboot's script runner: *.sh of each directory, sorted; for check dirs, the
    required.d scripts are strict (any failure fails the boot) and wanted.d relaxed. Each
    script's output is appended to `output` when given."""
    ok = True
    for directory in dirs:
        subdirs = (("required.d", strict), ("wanted.d", False)) if strict else (("", False),)
        for sub, must_pass in subdirs:
            for script in sorted((root / directory / sub).glob("*.sh")):
                proc = device.runner.run(["bash", str(script)], env=env, check=False,
                                         timeout=SCRIPT_TIMEOUT)
                _log_output(device, script.name, proc.stdout + proc.stderr)
                if output is not None:
                    output.append((proc.stdout + proc.stderr).decode(errors="replace"))
                verdict = "SUCCESS" if proc.returncode == 0 else \
                    f"FAILURE (exit code {proc.returncode})"
                device.progress.info(f"greenboot: script '{script.name}' {verdict}")
                if proc.returncode != 0 and must_pass:
                    ok = False
    return ok


def redboot_decision(device: Device, entry_count: int) -> bool:
    """redboot-auto-reboot: reboot only while greenboot's counter says there are attempts."""
    counter = device.grubenv.counter()
    if counter is None:
        reason = "boot_counter is unset: manual intervention necessary"
    elif counter == -1:
        reason = "fallback boot is still unhealthy: manual intervention necessary"
    elif entry_count <= 1:
        reason = "only one boot entry: manual intervention necessary"
    else:
        device.progress.info("redboot-auto-reboot: SYSTEM is UNHEALTHY. Rebooting...")
        return True
    device.progress.info(f"redboot-auto-reboot: {reason}")
    return False


def _log_output(device: Device, name: str, output: bytes) -> None:
    for line in output.decode(errors="replace").splitlines():
        if line.strip():
            device.progress.info(f"  [{name}] {line}")
