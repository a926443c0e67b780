"""One run of the updater, step by step, each step logged as one line."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from builder.core.errors import BuildError
from builder.core.runner import Runner
from builder.updater import apply
from builder.updater.delta_download import Download, Limits, Transfer
from builder.updater.fleet import Fleet
from builder.updater.freshness import (
    ACCEPTED,
    TIMESTAMP,
    TIMESTAMP_SIGNATURE,
    AcceptedFile,
    Timestamp,
    check_fresh,
    date_text,
    parse_timestamp,
)
from builder.updater.image_run import ImageRun
from builder.updater.index import (
    INDEX,
    SIGNATURE,
    DeltaFile,
    Fetched,
    Index,
    UpdateRefused,
    fetch_small,
    parse_index,
    verify_signature,
)
from builder.updater.outcome import Outcome
from builder.updater.pull import pull
from builder.updater.run_state import (
    ROLLED_BACK,
    STAGED,
    STAGING,
    Held,
    _check_space,
    read_commits,
    read_staged,
)
from builder.updater.state import write_atomic
from builder.updater.status import Status, StatusFile
from builder.updater.system import Booted, System
from builder.updater.update_config import UpdateConfig
from builder.updater.windows import Window, closed


class Run:
    def __init__(self, root: Path, config: UpdateConfig, runner: Runner,
                 status_file: StatusFile, log: Callable[[str], None], *,
                 scratch: Path | None = None) -> None:
        self.system = System(root, runner)
        self.config = config
        self.patience = config.patience(time.monotonic() + config.run_deadline_seconds)
        self.scratch = scratch   # the run's temporary files (builder/updater/state.py)
        self.status_file = status_file
        self.accepted = AcceptedFile(status_file.path.parent / ACCEPTED)
        self.log = log
        self.status = Status()
        self.method = ""
        self.delta: DeltaFile | None = None
        self.transfer = Transfer()
        self.metadata_bytes = 0
        self.layer_bytes = 0      # image mode without a delta: the layers pulled
        self.download_seconds: float | None = None
        self.rebooted = False
        self.statement: Timestamp | None = None
        self.fleet = Fleet(root, status_file.path.parent, config, runner, log)

    def report(self) -> dict[str, Any]:
        return {"method": self.method or None, "state": self.status.state,
                "target": self.status.target or None,
                "delta_bytes": self.delta.size if self.delta else None,
                "metadata_bytes": self.metadata_bytes, "layer_bytes": self.layer_bytes,
                "bytes_received": self.transfer.received, "requests": self.transfer.requests,
                "resumed_from": self.transfer.resumed_from,
                "interruptions": self.transfer.interruptions,
                "restarts": self.transfer.restarts, "reboot_requested": self.rebooted,
                "download_seconds": self.download_seconds}

    def _set(self, state: str, detail: str = "", **fields: Any) -> None:
        self.status.state, self.status.detail = state, detail
        for key, value in fields.items():
            setattr(self.status, key, value)
        self.status_file.write(self.status)

    def run(self) -> None:
        try:
            self._run()
        finally:
            # Verdicts go out whatever this run did: held, failed or staged.
            self.fleet.send()

    def note(self, kind: str) -> bool:
        """greenboot's green.d or red.d hook: note this boot's result for the verdict."""
        if self.fleet.outcomes.read() is None:
            return False  # nothing staged for a rollout: every boot but those costs nothing
        if self.config.mode == "image":
            booted, pending = ImageRun(self).ids()
            return self.fleet.note(kind, booted, pending)
        return self.fleet.note(kind, self.system.booted().checksum, apply.pending(self.system))

    def _run(self) -> None:
        if self.config.mode == "image":
            ImageRun(self).execute()
            return
        booted = self.system.booted()
        if self.system.boot_failed_health_checks():
            # greenboot found this boot unhealthy: it reboots, or rolls back, or waits for an
            # admin. Touch nothing, not even the status: what was staged stays recorded, so
            # the next run on the rolled-back deployment knows that it failed.
            self.log(f"greenboot found this boot of {booted.checksum[:12]} unhealthy: no "
                     "update is looked for until a boot is healthy")
            return
        self._note_rollback(booted)
        self.fleet.settle(booted.checksum, apply.pending(self.system))
        remote = self.config.remote or booted.remote
        self._set("checking", f"{remote}:{booted.ref}", booted=booted.checksum)
        self.log(f"booted {booted.checksum[:12]} of {remote}:{booted.ref}")
        keyrings = self._keyrings(remote)
        index = self._index(remote, booted, keyrings)
        if index is not None and (self._nothing_new(booted, index.to_commit, index.to_version)
                                  or self._held(booted, index.to_commit)):
            return
        self.fleet.event("offered")
        try:
            commit = self._fetch(index, booted, remote, keyrings)
            if index is None and self._nothing_new(booted, commit, None):
                return  # the summary's commit runs, was rolled back, or is staged: pulled again
            if not self.config.allow_downgrade:
                apply.check_not_older(self.system, booted, commit)
            self._downloaded(self._closed("apply") or self.fleet.budget_hold())
        except Held as held:
            self.fleet.held(held.reason)
            self._set("held", held.reason, target=index.to_commit if index else "")
            self.log(f"held: {held.reason}")
            return
        apply.stage(self.system, booted, remote, commit, self.log)
        write_atomic(self._state_file(STAGED), commit + "\n")
        shutil.rmtree(self.system.root / STAGING, ignore_errors=True)
        version = index.to_version if index and index.to_version else ""
        self._set("staged", target=commit, target_version=version)
        place = self.fleet.place
        if place is not None:
            self.fleet.staged(Outcome(booted.ref, place.rollout.id, place.wave, commit,
                                      version, booted.checksum, self._version(booted.checksum)))
        self.log(f"staged {commit[:12]} ({self.method}); it boots at the next reboot, "
                 "and greenboot keeps it only if its health checks pass")
        self._maybe_reboot(booted)

    def _nothing_new(self, booted: Booted, target: str, version: str | None) -> bool:
        """Whether there is nothing to stage: the target is what runs, was rolled back on
        this device, or is staged already. The booted or staged commit is never staged
        again: staging it again and rebooting into it on every run was a reboot loop."""
        if target == booted.checksum:
            self._set("idle", f"up to date: {booted.checksum[:12]} is the newest commit of "
                              f"{booted.ref}")
        elif target in self._rolled_back():
            self._set("idle", f"{target[:12]} was rolled back by greenboot on this device; "
                              "waiting for a newer commit")
        elif apply.pending(self.system) == target:
            self._set("staged", f"{target[:12]} is already staged", target=target,
                      target_version=version or "")
            self.log(f"{target[:12]} is already staged")
            self._maybe_reboot(booted)
            return True
        else:
            return False
        self.log(self.status.detail)
        return True

    def _gate(self, what: str) -> None:
        """Go on only inside the window for this work (download or apply)."""
        reason = self._closed(what)
        if reason is not None:
            raise Held(reason)

    def _closed(self, what: str) -> str | None:
        """Why the `what` window is closed now, or None. The rollout's windows for this
        device's label group come before update.yaml's (builder/updater/rollout_rules.py):
        the admin who set them for this release meant them for it."""
        group = self.fleet.windows()
        window: Window | None = getattr(group, what) if group else None
        if group is None or window is None:
            return closed(getattr(self.config, f"{what}_window"), what, self.config.now())
        reason = closed(window, what, group.now(self.config.now()))
        return None if reason is None else f"{reason} (the rollout's, for {group.selector()})"

    def _downloaded(self, hold: str | None) -> None:
        """The target is here: say so (with the hold, when one keeps it from staging; the
        collector grants budget slots to devices that downloaded), then stop if held."""
        self.fleet.held(hold)
        self.fleet.event("downloaded")
        if hold is not None:
            raise Held(hold)

    def _held(self, booted: Booted, target: str) -> bool:
        """The statement's rollout keeps this device where it is for now: nothing is
        downloaded, and the status says why."""
        rollout = self.statement.rollout if self.statement else None
        reason = self.fleet.gate(rollout, booted.ref, target)
        if reason is None:
            return False
        self._set("held", reason, target=target)
        self.log(f"held: {reason}")
        return True

    def _version(self, commit: str) -> str:
        text = self.system.ostree("show", "--print-metadata-key=version", commit, check=False)
        return text.strip().strip("'")

    def _note_rollback(self, booted: Booted) -> None:
        """A target this updater staged that neither runs nor waits to boot was rolled back
        by greenboot: remember it, so the updater does not stage it again and again."""
        staged = read_staged(self._state_file(STAGED))
        if staged is None:
            # State written before the staged record existed: the status names the target.
            previous = self.status_file.read()
            staged = previous.target if previous.state == "staged" and previous.target \
                else None
        if staged is None or staged == booted.checksum or apply.pending(self.system) == staged:
            return
        known = self._rolled_back()
        if staged not in known:
            write_atomic(self._state_file(ROLLED_BACK),
                         "".join(f"{c}\n" for c in [*known, staged]))
        self._state_file(STAGED).unlink(missing_ok=True)
        self.log(f"{staged[:12]} was staged but the device runs "
                 f"{booted.checksum[:12]}: greenboot rolled it back")

    def _rolled_back(self) -> list[str]:
        return read_commits(self._state_file(ROLLED_BACK))

    def _state_file(self, name: str) -> Path:
        return self.status_file.path.parent / name

    def _keyrings(self, remote: str) -> list[Path]:
        if self.system.remote_option(remote, "gpg-verify") == "false":
            raise UpdateRefused(f"remote {remote!r} has gpg-verify=false: microshift-update "
                                "installs signed commits only",
                                hint="add the remote with gpg-verify=true and the release key")
        return self.system.key_files(remote)

    def updates_url(self, remote: str, ref: str) -> str:
        base = self.config.updates_url
        if not base:
            url = self.system.remote_option(remote, "url")
            if url is None or not url.startswith(("http://", "https://")):
                raise BuildError(f"remote {remote!r} has no http(s) URL ({url})",
                                 hint="set updates_url in /etc/microshift/update.yaml")
            base = url.rstrip("/").rsplit("/", 1)[0] + "/updates/"
        return f"{base}{ref}/"

    def _index(self, remote: str, booted: Booted, keyrings: list[Path]) -> Index | None:
        base = self.updates_url(remote, booted.ref)
        index = fetch_small(base + INDEX, self.patience)
        if index is None:
            accepted = self.accepted.get(booted.ref)
            if accepted is not None:
                # A mirror that drops the index would leave the device to a summary that
                # may be replayed: once it has had a signed index, it wants one.
                raise UpdateRefused(f"{base + INDEX} is gone, but this device accepted an "
                                    f"index for {booted.ref} issued {date_text(accepted.issued)}: "
                                    "refusing to fall back to the summary alone",
                                    hint="publish the index again (`publish --gpg-key ...`)")
            self.log(f"no update index at {base + INDEX}: falling back to ostree pull")
            return None
        key = self._verified(index, base + SIGNATURE, keyrings,
                             "publish the index with `deltas --gpg-key ...`")
        parsed = parse_index(index.data, booted.ref, base + INDEX)
        self._check_fresh(base, index.data, booted.ref, keyrings)
        self.log(f"index {base + INDEX}: signed by {key[-16:]}, newest "
                 f"{parsed.to_commit[:12]} ({parsed.to_version or 'no version'}), "
                 f"{len(parsed.files)} delta files")
        return parsed

    def _check_fresh(self, base: str, index: bytes, ref: str, keyrings: list[Path]) -> None:
        """The index is the current one: its signed timestamp names it, has not expired and
        is not older than one this device accepted (builder/updater/freshness.py)."""
        url = base + TIMESTAMP
        stamp = fetch_small(url, self.patience)
        if stamp is None:
            raise UpdateRefused(f"{url} is missing: the index has no signed statement that "
                                "it is current", hint="publish with `--gpg-key`")
        self._verified(stamp, base + TIMESTAMP_SIGNATURE, keyrings, "publish with `--gpg-key`")
        parsed = parse_timestamp(stamp.data, url)
        check_fresh(parsed, ref, index, accepted=self.accepted.get(ref), now=time.time(),
                    what=url)
        self.accepted.put(parsed)
        self.statement = parsed

    def _verified(self, fetched: Fetched, signature_url: str, keyrings: list[Path],
                  hint: str) -> str:
        """Fetch the detached signature of a fetched metadata file and verify it with the
        remote's keys: the fingerprint of the signing key, or refused naming what failed."""
        signature = fetch_small(signature_url, self.patience)
        if signature is None:
            raise UpdateRefused(f"{fetched.url} has no signature "
                                f"({signature_url.rsplit('/', 1)[-1]})",
                                hint=hint)
        self.metadata_bytes += len(fetched.data) + len(signature.data)
        return verify_signature(self.system.runner, fetched.data, signature.data, keyrings,
                                fetched.url, scratch=self.scratch)

    def _fetch(self, index: Index | None, booted: Booted, remote: str,
               keyrings: list[Path]) -> str:
        delta = index.delta_from(booted.checksum) if index else None
        if index is not None and delta is None:
            self.log(f"no delta file from {booted.checksum[:12]}: falling back to ostree pull")
        if delta is not None and delta.size > self.config.staging_max_bytes:
            raise UpdateRefused(f"{delta.file} is {delta.size} bytes, over staging_max_bytes "
                                f"{self.config.staging_max_bytes}",
                                hint="raise staging_max_bytes in /etc/microshift/update.yaml")
        if delta is None:
            self._gate("download")
            self.method = "pull"
            self._set("downloading", f"ostree pull {remote}:{booted.ref}", method="pull",
                      target=index.to_commit if index else "")
            pulled = self._pull(remote, booted.ref)
            if index is not None and pulled != index.to_commit:
                # The summary ostree followed names another commit than the signed, current
                # index: an old summary served to keep the device where it is.
                raise UpdateRefused(f"the summary of {remote!r} names {pulled[:12]} for "
                                    f"{booted.ref}, the signed index {index.to_commit[:12]}: "
                                    "a stale or replayed summary; nothing is staged")
            return pulled
        self.method, self.delta = "delta-file", delta
        staged = self._download(index, delta, remote, booted)
        hold = self._closed("apply")
        if hold is not None:
            self._downloaded(hold)
        self._set("applying", f"{delta.file}")
        self.log(f"applying {delta.file} offline")
        apply.apply_delta_file(self.system, staged, delta.to_commit, remote, keyrings,
                               scratch=self.scratch)
        return delta.to_commit

    def _pull(self, remote: str, ref: str) -> str:
        pulled = pull(self.system, remote, ref, self.config.max_bytes_per_second,
                      patience=self.patience, log=self.log)
        self.transfer.received, self.transfer.requests = pulled.received, pulled.requests
        self.download_seconds = pulled.seconds or None
        return pulled.commit

    def _download(self, index: Index | None, delta: DeltaFile, remote: str,
                  booted: Booted) -> Path:
        staging = self.system.root / STAGING
        _check_space(staging, delta.file, delta.size)
        url = self.updates_url(remote, booted.ref) + delta.file
        self._set("downloading", url, method="delta-file", target=delta.to_commit,
                  target_version=index.to_version if index and index.to_version else "",
                  bytes_total=delta.size)
        config = self.config
        limits = Limits(config.max_bytes_per_second, config.retries,
                        float(config.retry_delay_seconds), self.patience)
        download = Download(staging, url, delta, limits, self._progress)
        if not download.complete():
            self._gate("download")
        self.transfer = download.transfer
        started = time.monotonic()
        self.log(f"downloading {url} ({delta.size} bytes"
                 + (f", capped at {config.max_bytes_per_second} B/s" if
                    config.max_bytes_per_second else "") + ")")
        try:
            path = download.run()
        finally:
            self.download_seconds = round(time.monotonic() - started, 3)
            self.log(f"download: {self.transfer.received} bytes in {self.transfer.requests} "
                     f"requests, {self.transfer.interruptions} cuts resumed, resumed from "
                     f"{self.transfer.resumed_from}, {self.download_seconds:.1f}s")
        self.log(f"{delta.file}: size and sha256 match the signed index")
        return path

    def _progress(self, done: int, total: int) -> None:
        self.status.bytes_done, self.status.bytes_total = done, total
        self.status_file.write(self.status)

    def _maybe_reboot(self, booted: Booted) -> None:
        """Reboot (when update.yaml says so) only into a deployment that is not the booted
        one."""
        config = self.config
        if not config.reboot:
            return
        pending = apply.pending(self.system)
        if pending is None or pending == booted.checksum:
            self.log(f"no reboot: the next deployment is the booted {booted.checksum[:12]}")
            return
        for reason in (closed(config.maintenance_window, "maintenance", config.now()),
                       self._closed("apply")):
            if reason is not None:
                self.log(f"the reboot waits: {reason}")
                return
        self.log("rebooting into the staged deployment")
        self.rebooted = True
        self.system.runner.run(["systemctl", "reboot"])


__all__ = ["ROLLED_BACK", "STAGED", "STAGING", "Held", "Run", "read_commits",
           "read_staged"]
