"""A simulated edge device: an ostree sysroot in a directory, updated over HTTP.

`ostree admin init-fs / os-init / deploy --sysroot DIR` work on a plain directory, so the
device is real ostree state without a VM: DIR/ostree/repo (bare), DIR/ostree/deploy/OS/
{deploy,var}, DIR/boot/loader/entries (BLS entries, what grub boots) and DIR/boot/grub2/grubenv
(the boot counter). What a running system keeps in memory lives in DIR/.device/ (the booted
root view, /run, stand-in commands); see builder.device.boot for the boot itself.

Pulls go over HTTP from a RepoServer, optionally through a tbf-throttled veth link between
two network namespaces (builder.device.netlink), and report time, bytes and requests.
"""

from __future__ import annotations

import json
import platform
import re
import shutil
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from builder.core.errors import BuildError, InputError
from builder.core.ostree import Repo, delta_dir
from builder.core.progress import Progress, human_bytes
from builder.core.runner import Runner
from builder.device.grubenv import Grubenv, set_upgrade_counter
from builder.device.netlink import SERVER_ADDR, ThrottledLink
from builder.device.repo_server import RepoServer
from builder.rpm.payloads import elf_machine

REMOTE = "edge"
BWRAP = "/usr/bin/bwrap"  # ostree runs deployment programs through this path
STATE_DIR = ".device"
CONFIG_FILE = "device.json"
OSNAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
CONF_LINE = re.compile(r"^\s*(?P<key>[A-Z_]+)=[\"']?(?P<value>[^\"'#\s]*)")


@dataclass(frozen=True)
class DeviceConfig:
    osname: str
    ref: str | None = None


@dataclass(frozen=True)
class Deployment:
    index: int        # position in the boot menu: 0 = default, 1 = rollback
    id: str           # checksum.serial, the deploy directory's name
    checksum: str
    path: Path
    version: str

    def label(self) -> str:
        return f"{self.version} ({self.checksum[:12]})"


@dataclass(frozen=True)
class LinkOptions:
    """How the update reaches the device."""

    rate_kbit: int | None = None     # None: plain 127.0.0.1, no throttling
    latency: float = 0.0             # seconds per request, added by the server (link RTT)
    drop_after: int | None = None    # the link drops after this many bytes (interrupted pull)
    retries: int = 5                 # ostree pull --network-retries


@dataclass(frozen=True)
class TransferReport:
    seconds: float
    body_bytes: int
    requests: int
    wire_bytes: int | None
    rate_kbit: int | None
    latency: float
    ostree_summary: str
    delta_bytes: int | None = None   # size of the static delta the server offered, if any

    def expected_seconds(self) -> float | None:
        """Bytes on the wire at the link rate, plus the modelled latency of every request."""
        if self.wire_bytes is None or self.rate_kbit is None:
            return None
        return self.wire_bytes * 8 / (self.rate_kbit * 1000) + self.requests * self.latency

    def text(self) -> str:
        line = (f"{human_bytes(self.body_bytes)} served in {self.requests} requests, "
                f"{self.seconds:.2f}s")
        expected = self.expected_seconds()
        if expected is not None and self.wire_bytes is not None:
            line += (f"; {human_bytes(self.wire_bytes)} on the wire at {self.rate_kbit} kbit/s"
                     f" + {self.latency * 1000:.0f} ms/request: expected {expected:.2f}s, "
                     f"measured/expected = {self.seconds / expected:.2f}")
        if self.delta_bytes is not None:
            # ostree 2022.7 marks the delta's commit partial and, on a slow link, also
            # fetches the changed objects loose while the delta part downloads (ostree#2680).
            line += f"; the static delta itself is {human_bytes(self.delta_bytes)}"
        return line


class PullFailed(BuildError):
    def __init__(self, message: str, report: TransferReport) -> None:
        super().__init__(message, hint="the device keeps its deployments; retry the upgrade")
        self.report = report


class Device:
    def __init__(self, sysroot: Path, runner: Runner, progress: Progress) -> None:
        self.sysroot = sysroot.resolve()
        self.runner = runner
        self.progress = progress
        self.bwrap = Path(BWRAP)  # where ostree runs deployment programs from
        self.state_dir = self.sysroot / STATE_DIR
        self.grubenv = Grubenv(self.sysroot / "boot/grub2/grubenv")
        self.repo = Repo(self.sysroot / "ostree/repo", runner)

    # --- state ------------------------------------------------------------------------
    def config(self) -> DeviceConfig:
        path = self.state_dir / CONFIG_FILE
        if not path.is_file():
            raise InputError(str(self.sysroot), "", "not a simulated device",
                             hint=f"run `python -m builder device init --sysroot {self.sysroot}`")
        return DeviceConfig(**json.loads(path.read_text()))

    def _save_config(self, config: DeviceConfig) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_dir / (CONFIG_FILE + ".new")
        tmp.write_text(json.dumps(asdict(config), indent=2) + "\n")
        tmp.replace(self.state_dir / CONFIG_FILE)

    @property
    def stateroot_var(self) -> Path:
        return self.sysroot / "ostree/deploy" / self.config().osname / "var"

    def _admin(self, *args: str) -> str:
        return self.runner.output(["ostree", "admin", *args, f"--sysroot={self.sysroot}"])

    # --- lifecycle --------------------------------------------------------------------
    def init(self, osname: str) -> None:
        if not OSNAME_RE.match(osname):
            raise InputError("command line", "--osname",
                             f"{osname!r} is not a valid ostree OS name",
                             hint="letters, digits, '.', '_' and '-'")
        if self.sysroot.exists() and any(self.sysroot.iterdir()):
            raise InputError(str(self.sysroot), "", "directory is not empty",
                             hint="pick a new directory for the device")
        self.sysroot.mkdir(parents=True, exist_ok=True)
        self._admin("init-fs", str(self.sysroot))
        self._admin("os-init", osname)
        self._save_config(DeviceConfig(osname))
        self.grubenv.write({})
        self.progress.info(f"device {self.sysroot}: empty sysroot, OS {osname}")

    def install(self, source: Path | str, ref: str, commit: str | None = None,
                gpg_key: Path | None = None) -> Deployment:
        """Factory imaging: pull `ref` (at `commit` if given) and deploy it as the only OS.

        With `gpg_key`, the device trusts that public key for its remote as the kickstart
        sets it up (gpg-verify=true, gpg-verify-summary=true,
        gpgkeypath=/etc/pki/ostree/REMOTE.gpg; here the key is kept in the device's state
        directory) and the pull already verifies the commit and the summary."""
        config = self.config()
        if self.deployments():
            raise BuildError(f"device {self.sysroot} is already installed",
                             hint="use `device upgrade`, or init a new device")
        url = source if isinstance(source, str) else f"file://{Path(source).resolve()}"
        self.repo.remote_add(REMOTE, url)
        if gpg_key is not None:
            trusted = self.state_dir / "pki" / f"{REMOTE}.gpg"
            trusted.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(gpg_key, trusted)
            for option in ("gpg-verify=true", "gpg-verify-summary=true",
                           f"gpgkeypath={trusted}"):
                key, value = option.split("=", 1)
                self.runner.run(["ostree", f"--repo={self.repo.path}", "config", "set",
                                 f'remote "{REMOTE}".{key}', value])
        self.runner.run(["ostree", f"--repo={self.repo.path}", "pull", REMOTE,
                         f"{ref}@{commit}" if commit else ref])
        self._save_config(DeviceConfig(config.osname, ref))
        return self.deploy(ref)

    def deploy(self, ref: str) -> Deployment:
        if self.deployments():
            self._check_policy_refresh(ref)
        self._admin("deploy", f"--os={self.config().osname}", f"{REMOTE}:{ref}")
        deployment = self.deployments()[0]
        self.progress.info(f"deployed {deployment.label()} as the default deployment")
        return deployment

    def _check_policy_refresh(self, ref: str) -> None:
        """Deploying over an existing deployment, ostree refreshes a new deployment's SELinux
        policy by running its semodule through /usr/bin/bwrap (sysroot_finalize_selinux_policy);
        say so in one line instead of ostree's "Failed to execute child process", and when
        the deployment is of another architecture, whether this machine can run its
        programs at all (qemu's user-mode emulation, registered with binfmt_misc)."""
        proc = self.runner.run(["ostree", f"--repo={self.repo.path}", "ls", f"{REMOTE}:{ref}",
                                "/usr/etc/selinux/config"], check=False)
        if proc.returncode != 0:
            return
        if not self.bwrap.is_file():
            raise BuildError(f"{REMOTE}:{ref} carries an SELinux policy, and ostree refreshes it "
                             f"on upgrade by running the deployment's semodule through "
                             f"{self.bwrap}, which is not installed",
                             hint="install bubblewrap (ci/install-host-tools.sh)")
        machine = self._program_machine(ref, "/usr/sbin/semodule")
        if machine is not None and not can_run(machine):
            raise BuildError(f"{REMOTE}:{ref} is built for {machine}, which this "
                             f"{platform.machine()} machine cannot run: ostree runs the new "
                             "deployment's semodule on every upgrade",
                             hint=f"install qemu-user-static and register its {machine} binfmt "
                                  "handler (ci/install-host-tools.sh does both)")

    def _program_machine(self, ref: str, path: str) -> str | None:
        """The architecture of an ELF program in the ref's tree (None: absent, or a script)."""
        proc = self.runner.run(["ostree", f"--repo={self.repo.path}", "cat", f"{REMOTE}:{ref}",
                                path], check=False)
        if proc.returncode != 0:
            return None
        with tempfile.TemporaryDirectory(prefix="elf-") as scratch:
            copy = Path(scratch) / "program"
            copy.write_bytes(proc.stdout[:64])
            return elf_machine(copy)

    def upgrade(self, source: Path | str, link: LinkOptions) -> tuple[TransferReport, Deployment]:
        """Pull the ref's new head over HTTP, deploy it, arm greenboot's boot counter."""
        config = self.config()
        if config.ref is None:
            raise BuildError(f"device {self.sysroot} has no OS installed",
                             hint="run `device install` first")
        before = self.deployments()
        report = self.fetch(source, config.ref, link)
        new_head = self.repo.rev_parse(f"{REMOTE}:{config.ref}")
        if before and new_head and isinstance(source, Path):
            delta = delta_dir(source, before[0].checksum, new_head)
            if delta.is_dir():
                report = replace(report, delta_bytes=sum(
                    f.stat().st_size for f in delta.rglob("*") if f.is_file()))
        if before and before[0].checksum == new_head:
            self.progress.info(f"already on {before[0].label()}: nothing to deploy")
            return report, before[0]
        deployment = self.deploy(config.ref)
        attempts = max_boot_attempts(deployment.path)
        set_upgrade_counter(self.grubenv, attempts)
        self.progress.info(f"greenboot: boot_counter={attempts}, boot_success=0 "
                           f"({deployment.version} gets {attempts} boots to prove itself)")
        return report, deployment

    def fetch(self, source: Path | str, ref: str, link: LinkOptions) -> TransferReport:
        """`ostree pull` of ref into the device repo; a served path goes over RepoServer."""
        with ExitStack() as stack:
            argv_prefix: list[str] = []
            server: RepoServer | None = None
            throttled: ThrottledLink | None = None
            if isinstance(source, str):
                url = source
            else:
                if link.rate_kbit is not None:
                    throttled = stack.enter_context(ThrottledLink(self.runner, link.rate_kbit))
                    argv_prefix = throttled.device_argv([])
                    server = RepoServer(source, SERVER_ADDR, 8080, latency=link.latency,
                                        make_server=throttled.make_in_server_ns)
                else:
                    server = RepoServer(source, latency=link.latency)
                stack.enter_context(server)
                server.drop_link_after(link.drop_after)
                url = server.url
            return self._timed_pull(argv_prefix, url, ref, link, server=server,
                                    throttled=throttled)
        raise AssertionError("unreachable")

    def _timed_pull(self, prefix: list[str], url: str, ref: str, link: LinkOptions, *,
                    server: RepoServer | None, throttled: ThrottledLink | None) -> TransferReport:
        wire0 = throttled.server_tx_bytes() if throttled else 0
        started = time.monotonic()
        proc = self.runner.run([*prefix, "ostree", f"--repo={self.repo.path}", "pull",
                                f"--url={url}", f"--network-retries={link.retries}",
                                REMOTE, ref], check=False)
        seconds = time.monotonic() - started
        stats = server.stats if server else None
        lines = [ln.strip() for ln in proc.stdout.decode(errors="replace").splitlines()]
        report = TransferReport(
            seconds=seconds, body_bytes=stats.body_bytes if stats else 0,
            requests=stats.requests if stats else 0,
            wire_bytes=(throttled.server_tx_bytes() - wire0) if throttled else None,
            rate_kbit=link.rate_kbit if throttled else None, latency=link.latency,
            ostree_summary=next((ln for ln in reversed(lines) if ln), ""))
        if proc.returncode != 0:
            reason = proc.stderr.decode(errors="replace").strip().splitlines()
            raise PullFailed(f"pull of {ref} from {url} failed after {seconds:.1f}s: "
                             f"{reason[-1] if reason else 'exit ' + str(proc.returncode)}",
                             report)
        return report

    # --- deployments ------------------------------------------------------------------
    def deployments(self) -> list[Deployment]:
        """The boot menu, as grub's blscfg orders it (highest BLS version first)."""
        found: list[Deployment] = []
        for index, entry in enumerate(boot_entries(self.sysroot)):
            path = (self.sysroot / entry.lstrip("/")).resolve()
            checksum = path.name.split(".")[0]
            version = self.repo.metadata(checksum, "version") or "(no version)"
            found.append(Deployment(index, path.name, checksum, path, version))
        return found

    def rollback(self) -> None:
        """Make the rollback deployment the default by removing the failed default.

        rpm-ostree rollback reorders the deployments; the ostree 2022.7 CLI has no set-default,
        and a fresh deploy of the old commit would be a new deployment (a new id, so no
        backup of MicroShift data would match it). Undeploying the failed one keeps the
        rollback deployment itself, with its id; its commit stays in the repo.
        """
        self._admin("undeploy", "0")

    def write_greenboot_conf(self, deployment: Deployment, values: dict[str, str]) -> None:
        """Set keys in the deployment's /etc/greenboot/greenboot.conf, as an admin would."""
        conf = deployment.path / "etc/greenboot/greenboot.conf"
        lines = conf.read_text().splitlines() if conf.is_file() else []
        kept = [ln for ln in lines if (m := CONF_LINE.match(ln)) is None or m["key"] not in values]
        kept += [f"{key}={value}" for key, value in values.items()]
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text("\n".join(kept) + "\n")

    def reset(self) -> None:
        """Remove the device directory (simulation reruns start from an empty disk)."""
        if self.sysroot.exists():
            release_deployments(self.sysroot, self.runner)
            shutil.rmtree(self.sysroot)


def can_run(machine: str) -> bool:
    """Whether this machine runs `machine`'s programs: natively, or through a binfmt_misc
    handler (qemu-user-static registers /proc/sys/fs/binfmt_misc/qemu-ARCH)."""
    if machine == platform.machine():
        return True
    handler = Path("/proc/sys/fs/binfmt_misc") / f"qemu-{machine}"
    try:
        return handler.read_text().splitlines()[0] == "enabled"
    except (OSError, IndexError):
        return False


def release_deployments(tree: Path, runner: Runner) -> None:
    """Clear the immutable flag ostree sets on every deployment root under `tree`, so the
    directories can be deleted (`ostree admin deploy` does `chattr +i` on them)."""
    for deploy in tree.rglob("ostree/deploy/*/deploy/*"):
        if deploy.is_dir() and not deploy.is_symlink():
            runner.run(["chattr", "-i", str(deploy)], check=False)


def boot_entries(sysroot: Path) -> list[str]:
    """The `ostree=` paths of the BLS entries, highest `version` first (grub's order)."""
    entries: list[tuple[int, str]] = []
    for conf in (sysroot / "boot/loader/entries").glob("*.conf"):
        fields = dict(line.split(" ", 1) for line in conf.read_text().splitlines() if " " in line)
        match = re.search(r"(?:^|\s)ostree=(\S+)", fields.get("options", ""))
        if match:
            entries.append((int(fields.get("version", "0")), match.group(1)))
    return [path for _, path in sorted(entries, reverse=True)]


def max_boot_attempts(deployment_path: Path) -> int:
    """GREENBOOT_MAX_BOOT_ATTEMPTS from the deployment's /etc/greenboot/greenboot.conf (3)."""
    conf = deployment_path / "etc/greenboot/greenboot.conf"
    value = read_conf(conf).get("GREENBOOT_MAX_BOOT_ATTEMPTS", "3")
    if not re.fullmatch(r"[1-9]", value):
        raise InputError(str(conf), "GREENBOOT_MAX_BOOT_ATTEMPTS",
                         f"{value!r} is not a number of boots in 1..9")
    return int(value)


def read_conf(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    return {m["key"]: m["value"] for line in path.read_text().splitlines()
            if (m := CONF_LINE.match(line))}
