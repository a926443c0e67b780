"""What the updater needs to know about the device: its booted commit, its origin, its remote.

On a device the root is `/`; under the device simulation it is the booted root view that
builder.device.boot composes ($MICROSHIFT_ROOT), where `sysroot` points at the simulated
disk. The booted deployment is found as ostree-prepare-root finds it: the `ostree=` argument
of the kernel command line, a path under the sysroot whose target is the deployment; when
that boot link is gone (the deployments were rewritten since boot), as libostree finds it:
the deployment whose /usr is the booted root's.
"""

from __future__ import annotations

import calendar
import configparser
import re
import time
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import BuildError
from builder.core.runner import Runner

OSTREE_ARG = re.compile(r"(?:^|\s)ostree=(\S+)")
DEPLOY_DIR = re.compile(r"^(?P<checksum>[0-9a-f]{64})\.(?P<serial>[0-9]+)$")
DATE_LINE = re.compile(r"^Date:\s+(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \+0000$", re.M)
HEALTHCHECK = "greenboot-healthcheck.service"
REFSPEC = re.compile(r"^(?:(?P<remote>[^:\s]+):)?(?P<ref>[^:\s]+)$")


@dataclass(frozen=True)
class Booted:
    checksum: str
    osname: str
    remote: str
    ref: str
    deployment: Path


@dataclass(frozen=True)
class System:
    """The device: its root, its sysroot and the ostree repository in it."""

    root: Path
    runner: Runner

    @property
    def is_host(self) -> bool:
        """Running on the device itself (root `/`): deployments are staged for shutdown."""
        return self.root == Path("/")

    @property
    def sysroot(self) -> Path:
        return Path("/") if self.is_host else (self.root / "sysroot").resolve()

    @property
    def repo(self) -> Path:
        return self.sysroot / "ostree/repo"

    def ostree(self, *args: str, check: bool = True, timeout: float | None = None) -> str:
        proc = self.runner.run(["ostree", f"--repo={self.repo}", *args], check=check,
                               timeout=timeout)
        return proc.stdout.decode(errors="replace")

    def admin(self, *args: str) -> str:
        return self.runner.output(["ostree", "admin", *args, f"--sysroot={self.sysroot}"])

    def booted(self) -> Booted:
        cmdline = (self.root / "proc/cmdline").read_text()
        match = OSTREE_ARG.search(cmdline)
        if match is None:
            raise BuildError("the kernel command line has no ostree= argument: not an "
                             "ostree-booted system", hint="microshift-update updates "
                             "RHEL for Edge (ostree) devices only")
        deployment = (self.sysroot / match.group(1).lstrip("/")).resolve()
        found = DEPLOY_DIR.match(deployment.name)
        if found is None or deployment.parent.name != "deploy":
            # The boot link of the command line is gone once the deployments were rewritten
            # since boot (greenboot's rollback undeploys the failed default: the booted one
            # moves to index 0 of a new boot version). libostree then knows the booted
            # deployment as the one whose /usr is this root's /usr: so does this.
            deployment = self._deployment_of_usr() or deployment
            found = DEPLOY_DIR.match(deployment.name)
        if found is None or deployment.parent.name != "deploy":
            raise BuildError(f"ostree={match.group(1)} does not lead to a deployment "
                             f"({deployment}), and no deployment has this root's /usr")
        osname = deployment.parent.parent.name
        remote, ref = read_origin(deployment.with_name(deployment.name + ".origin"))
        return Booted(found["checksum"], osname, remote, ref, deployment)

    def boot_failed_health_checks(self) -> bool:
        """Whether greenboot's health check failed on this boot (its unit is failed; an image
        without greenboot has no such unit and never fails it)."""
        proc = self.runner.run(["systemctl", "is-failed", HEALTHCHECK], check=False)
        return proc.returncode == 0 and proc.stdout.decode(errors="replace").strip() == "failed"

    def _deployment_of_usr(self) -> Path | None:
        try:
            usr = (self.root / "usr").stat()
        except OSError:
            return None
        for candidate in sorted(self.sysroot.glob("ostree/deploy/*/deploy/*")):
            try:
                other = (candidate / "usr").stat()
            except OSError:
                continue
            if (other.st_dev, other.st_ino) == (usr.st_dev, usr.st_ino):
                return candidate
        return None

    def remote_option(self, remote: str, key: str) -> str | None:
        proc = self.runner.run(["ostree", f"--repo={self.repo}", "config", "get",
                                f'--group=remote "{remote}"', key], check=False)
        value = proc.stdout.decode(errors="replace").strip()
        return value if proc.returncode == 0 and value else None

    def key_files(self, remote: str) -> list[Path]:
        """The keyrings a pull from `remote` verifies with, as ostree chooses them: the
        remote's gpgkeypath and the keys --gpg-import stored; without either, the global
        trusted.gpg.d directories."""
        files: list[Path] = []
        for entry in re.split(r"[;,]", self.remote_option(remote, "gpgkeypath") or ""):
            path = Path(entry.strip())
            if entry.strip():
                files += sorted(p for p in path.iterdir() if p.is_file()) \
                    if path.is_dir() else [path]
        imported = self.repo / f"{remote}.trustedkeys.gpg"
        if imported.is_file():
            files.append(imported)
        if not files:
            for directory in ("etc/pki/ostree", "usr/share/ostree/trusted.gpg.d"):
                base = self.root / directory
                files += sorted(p for p in base.glob("*.gpg") if p.is_file())
        missing = [str(p) for p in files if not p.is_file()]
        if missing:
            raise BuildError(f"remote {remote!r}: gpgkeypath {missing[0]} does not exist")
        return files

    def timestamp(self, commit: str) -> int:
        """The commit's time (UTC seconds), from `ostree show` (its Date line is UTC)."""
        match = DATE_LINE.search(self.ostree("show", commit))
        if match is None:
            raise BuildError(f"ostree show {commit} printed no UTC date")
        return calendar.timegm(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S"))


def read_origin(path: Path) -> tuple[str, str]:
    """(remote, ref) of a deployment's origin file (`[origin] refspec=REMOTE:REF`)."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(path.read_text())
        refspec = parser.get("origin", "refspec")
    except (OSError, configparser.Error) as exc:
        raise BuildError(f"{path}: no [origin] refspec ({exc})") from exc
    match = REFSPEC.match(refspec.strip())
    if match is None or not match["remote"]:
        raise BuildError(f"{path}: refspec {refspec!r} names no remote",
                         hint="the device must track REMOTE:REF to be updated")
    return match["remote"], match["ref"]
