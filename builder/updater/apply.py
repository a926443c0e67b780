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
from collections.abc import Callable
from pathlib import Path

from builder.core.errors import ToolError
from builder.updater.fetch import DeadlineReached, Patience, check_deadline
from builder.updater.index import UpdateRefused
from builder.updater.processes import repo_lock_holders
from builder.updater.system import Booted, System

DEPLOYMENT_LINE = re.compile(r"^[* ] (?P<os>\S+) (?P<checksum>[0-9a-f]{64})\.\d+", re.M)


def apply_delta_file(system: System, delta: Path, commit: str, remote: str,
                     keyrings: list[Path], *, scratch: Path | None = None) -> None:
    try:
        system.ostree("static-delta", "apply-offline", str(delta))
    except ToolError as exc:
        raise UpdateRefused(f"{delta.name}: ostree could not apply it: "
                            f"{tool_reason(exc)}" + lock_note(system, exc)) from exc
    verify_commit(system, commit, remote, keyrings, scratch)


def pull(system: System, remote: str, ref: str, url: str | None = None, *,
         patience: Patience | None = None) -> str:
    """`ostree pull REMOTE REF` (verified by ostree itself, with the remote's keys whatever
    `url` the bytes come from), ended at the run's deadline; the commit it fetched."""
    doing = f"pulling {remote}:{ref}"
    left = patience.remaining() if patience else None
    if patience is not None:
        check_deadline(patience, doing)
    try:
        system.ostree("pull", *([f"--url={url}"] if url else []), remote, ref,
                      timeout=left)
    except ToolError as exc:
        if exc.returncode == -1 and left is not None:
            raise DeadlineReached(f"the run's deadline (run_deadline_seconds) passed while "
                                  f"{doing}; ostree pull was stopped",
                                  hint="the next run pulls again; objects already fetched "
                                       "stay in the repository") from None
        # The status keeps one line: ostree's own reason (a bad summary signature, corrupt
        # data) is the one that tells the admin what happened.
        raise UpdateRefused(f"ostree pull {remote}:{ref} failed: {tool_reason(exc)}"
                            + lock_note(system, exc),
                            hint="the device keeps its commit") from exc
    return system.ostree("rev-parse", f"{remote}:{ref}").strip()


def lock_note(system: System, exc: ToolError) -> str:
    """For a failure on the repository's lock: who holds it."""
    if "lock" not in exc.stderr.lower():
        return ""
    holders = repo_lock_holders(system.repo)
    return (f"; the repository's lock is held by {', '.join(holders)}" if holders
            else "; no other process has the repository's lock open now")


def tool_reason(exc: ToolError) -> str:
    """ostree's own reason on one line: its last `error:` message with the lines that
    continue it (a GPG failure goes on with "BAD signature from ..."), else its last line."""
    lines = [line.strip() for line in exc.stderr.strip().splitlines() if line.strip()]
    starts = [i for i, line in enumerate(lines) if line.startswith("error: ")]
    if not lines:
        return f"exit code {exc.returncode}"
    reason = lines[starts[-1]:] if starts else lines[-1:]
    return "; ".join(reason).removeprefix("error: ")


def verify_commit(system: System, commit: str, remote: str, keyrings: list[Path],
                  scratch_dir: Path | None = None) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="microshift-update-verify-", dir=scratch_dir))
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


def stage(system: System, booted: Booted, remote: str, commit: str,
          log: Callable[[str], None]) -> None:
    """Point REMOTE:REF at the commit and deploy it: staged for shutdown on a device, written
    at once under the simulation (ostree stages only on a booted system). What counts is
    what `ostree admin status` shows afterwards: a deploy that failed after making the
    deployment the default (its cleanup could not take the repository's lock) staged it."""
    args = ["deploy", f"--os={booted.osname}", f"{remote}:{booted.ref}"]
    if system.is_host:
        args.insert(1, "--stage")
    try:
        system.ostree("refs", f"--create={remote}:{booted.ref}", "--force", commit)
        system.admin(*args)
    except ToolError as exc:
        words = [w for w in exc.argv[1:] if not w.startswith("-")][:2]
        what = f"ostree {' '.join(words)} failed: {tool_reason(exc)}" + lock_note(system, exc)
        if pending(system) != commit:
            raise UpdateRefused(what, hint="nothing was staged; the next run tries again") \
                from None
        log(f"{what}; `ostree admin status` shows {commit[:12]} as the next deployment: "
            "it is staged")
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
        raise UpdateRefused(f"systemctl start {FINALIZE} failed: {tool_reason(exc)}: the staged "
                            "deployment would be dropped at shutdown",
                            hint=f"check `systemctl status {FINALIZE}`") from exc


def pending(system: System) -> str | None:
    """The checksum of the default (or staged) deployment, as `ostree admin status` lists
    it first."""
    match = DEPLOYMENT_LINE.search(system.admin("status"))
    return match["checksum"] if match else None
