"""Applying an update to the device: a verified delta file offline, or a pull; then staging.

Whatever the way in, the new commit must verify with the GPG keys of the device's ostree
remote, checked as a pull checks it (a pull of the commit's metadata with gpg-verify=true,
from the device's repository into a scratch one), and must not be older than the booted
commit unless the admin allows downgrades. Only then does the ref move and the deployment
get staged. A refused commit is deleted from the repository again: nothing is staged, the
device keeps running its commit.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from builder.core.errors import ToolError
from builder.updater.index import UpdateRefused
from builder.updater.system import Booted, System

DEPLOYMENT_LINE = re.compile(r"^[* ] (?P<os>\S+) (?P<checksum>[0-9a-f]{64})\.\d+", re.M)


def apply_delta_file(system: System, delta: Path, commit: str, remote: str,
                     keyrings: list[Path]) -> None:
    try:
        system.ostree("static-delta", "apply-offline", str(delta))
    except ToolError as exc:
        raise UpdateRefused(f"{delta.name}: ostree could not apply it: "
                            f"{_reason(exc)}") from exc
    verify_commit(system, commit, remote, keyrings)


def pull(system: System, remote: str, ref: str, url: str | None = None) -> str:
    """`ostree pull REMOTE REF` (verified by ostree itself, with the remote's keys whatever
    `url` the bytes come from); the commit it fetched."""
    try:
        system.ostree("pull", *([f"--url={url}"] if url else []), remote, ref)
    except ToolError as exc:
        # The status keeps one line: ostree's own reason (a bad summary signature, corrupt
        # data) is the one that tells the admin what happened.
        raise UpdateRefused(f"ostree pull {remote}:{ref} failed: {_reason(exc)}",
                            hint="the device keeps its commit") from exc
    return system.ostree("rev-parse", f"{remote}:{ref}").strip()


def _reason(exc: ToolError) -> str:
    """ostree's own reason on one line: its last `error:` message with the lines that
    continue it (a GPG failure goes on with "BAD signature from ..."), else its last line."""
    lines = [line.strip() for line in exc.stderr.strip().splitlines() if line.strip()]
    starts = [i for i, line in enumerate(lines) if line.startswith("error: ")]
    if not lines:
        return f"exit code {exc.returncode}"
    reason = lines[starts[-1]:] if starts else lines[-1:]
    return "; ".join(reason).removeprefix("error: ")


def verify_commit(system: System, commit: str, remote: str, keyrings: list[Path]) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="microshift-update-verify-"))
    try:
        check = scratch / "repo"
        run = system.runner.run
        run(["ostree", f"--repo={check}", "init", "--mode=archive"])
        run(["ostree", f"--repo={check}", "remote", "add", "--set=gpg-verify=true",
             "--set=gpgkeypath=" + ";".join(str(k) for k in keyrings), remote,
             f"file://{system.repo}"])
        proc = run(["ostree", f"--repo={check}", "pull", "--commit-metadata-only", remote,
                    commit], check=False)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if proc.returncode != 0:
        lines = proc.stderr.decode(errors="replace").strip().splitlines()
        forget(system, commit)
        raise UpdateRefused(f"commit {commit[:12]} does not verify with the keys of remote "
                            f"{remote!r}: {lines[-1] if lines else 'no good signature'}",
                            hint="nothing was staged; the device keeps its commit")


def check_not_older(system: System, booted: Booted, commit: str) -> None:
    new, old = system.timestamp(commit), system.timestamp(booted.checksum)
    if new < old:
        forget(system, commit)
        raise UpdateRefused(f"commit {commit[:12]} is older than the booted commit "
                            f"{booted.checksum[:12]}: a downgrade",
                            hint="set allow_downgrade: true in /etc/microshift/update.yaml "
                                 "to roll a fleet back on purpose")


def forget(system: System, commit: str) -> None:
    """Delete a refused commit and the objects only it reached."""
    system.ostree("prune", f"--delete-commit={commit}", check=False)


def stage(system: System, booted: Booted, remote: str, commit: str) -> None:
    """Point REMOTE:REF at the commit and deploy it: staged for shutdown on a device, written
    at once under the simulation (ostree stages only on a booted system)."""
    system.ostree("refs", f"--create={remote}:{booted.ref}", "--force", commit)
    args = ["deploy", f"--os={booted.osname}", f"{remote}:{booted.ref}"]
    if system.is_host:
        args.insert(1, "--stage")
    system.admin(*args)
    if system.is_host:
        _start_finalize(system)


FINALIZE = "ostree-finalize-staged.service"


def _start_finalize(system: System) -> None:
    """ostree-finalize-staged.path starts the finalize service when the staged deployment
    appears, and its ExecStop writes the deployment at shutdown. A reboot asked for right
    after staging can begin before the path unit has acted: the staged deployment is then
    dropped (the VM tier saw it). Starting the service here closes that window."""
    try:
        system.runner.run(["systemctl", "start", FINALIZE])
    except ToolError as exc:
        raise UpdateRefused(f"systemctl start {FINALIZE} failed: {_reason(exc)}: the staged "
                            "deployment would be dropped at shutdown",
                            hint=f"check `systemctl status {FINALIZE}`") from exc


def pending(system: System) -> str | None:
    """The checksum of the default (or staged) deployment, as `ostree admin status` lists
    it first."""
    match = DEPLOYMENT_LINE.search(system.admin("status"))
    return match["checksum"] if match else None
