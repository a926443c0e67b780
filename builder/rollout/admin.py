"""The admin's side of a rollout: start, status, advance, halt, resume, and the halt the
collector makes by itself.

Every change re-signs the ref's statement (SITE/updates/REF/timestamp.json) with the release
key, under the statements lock (builder/publish/rollout_statement.py), issued after the one it
replaces and valid as long as it was: devices see the change at their next run, and a
replay of the older statement is refused like any replayed index. `now` is the caller's
clock (the tests' is their own): it dates waves and measures their soak.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from builder.core.errors import BuildError, InputError
from builder.core.runner import Runner
from builder.core.signing import SigningKey, stop_agent
from builder.publish.rollout_statement import (
    RolloutPlan,
    index_head,
    read_statement,
    resign,
    statements_lock,
)
from builder.rollout.budget import (
    HOLDER_SILENT_AFTER,
    budget_status,
    budget_text,
    held_devices,
    record_grants,
    with_grants,
)
from builder.rollout.store import Store, WaveCounts
from builder.rollout.verdict_check import Verdict
from builder.updater.freshness import Timestamp
from builder.updater.waves import Rollout, Wave

UPDATES = "updates"


@dataclass(frozen=True)
class Site:
    """A published directory (`publish --to DIR`, or the copy named by --rollouts-from)."""

    root: Path

    def ref_dir(self, ref: str) -> Path:
        return self.root / UPDATES / ref

    def rollouts(self) -> dict[str, Rollout]:
        found: dict[str, Rollout] = {}
        base = self.root / UPDATES
        for stamp_file in sorted(base.rglob("timestamp.json")) if base.is_dir() else []:
            ref = stamp_file.parent.relative_to(base).as_posix()
            stamp = read_statement(stamp_file.parent)
            if stamp is not None and stamp.rollout is not None:
                found[ref] = stamp.rollout
        return found

    def statement(self, ref: str | None) -> tuple[str, Timestamp, Rollout]:
        """The ref's statement and its rollout (the only ref with one when `ref` is None)."""
        if ref is None:
            refs = sorted(self.rollouts())
            if len(refs) != 1:
                raise InputError("command line", "--ref", f"{self.root} has "
                                 f"{len(refs)} refs with a rollout ({', '.join(refs) or 'none'})"
                                 "; name one")
            ref = refs[0]
        stamp = read_statement(self.ref_dir(ref))
        if stamp is None or stamp.rollout is None:
            raise BuildError(f"{self.ref_dir(ref)}: no rollout in the published statement",
                             hint="publish with --rollout-waves, or `rollout start`")
        return ref, stamp, stamp.rollout


@dataclass(frozen=True)
class Signer:
    runner: Runner
    key: SigningKey

    def sign(self, site: Site, ref: str, stamp: Timestamp, rollout: Rollout) -> None:
        try:
            resign(self.runner, self.key, site.ref_dir(ref), ref,
                   validity=stamp.expires - stamp.issued, rollout=rollout)
        finally:
            stop_agent(self.runner, self.key.homedir)


def open_wave(rollout: Rollout) -> int:
    """The newest open wave (waves open in order)."""
    return max(n for n, wave in enumerate(rollout.waves) if wave.opened is not None)


def start(site: Site, signer: Signer, ref: str, plan: RolloutPlan, now: int) -> Rollout:
    with statements_lock(site.root):
        stamp = read_statement(site.ref_dir(ref))
        if stamp is None:
            raise BuildError(f"{site.ref_dir(ref)}: nothing published for {ref}",
                             hint="publish first (publish --rollout-waves starts it there)")
        head = index_head(site.ref_dir(ref))
        if stamp.rollout is not None and stamp.rollout.commit == head \
                and stamp.rollout.state != "complete":
            raise BuildError(f"rollout {stamp.rollout.id} of {head[:12]} is already "
                             f"{stamp.rollout.state}", hint="halt, resume or advance it")
        rollout = plan.start(ref, head, now)
        signer.sign(site, ref, stamp, rollout)
    return rollout


def advance(site: Site, store: Store, signer: Signer, ref: str | None, now: int, *,
            force: bool = False) -> Rollout:
    """Open the next wave, when the open one met its success threshold and soaked."""
    with statements_lock(site.root):
        ref, stamp, rollout = site.statement(ref)
        if rollout.state != "active":
            raise BuildError(f"rollout {rollout.id} is {rollout.state}"
                             + (f" ({rollout.reason})" if rollout.reason else ""),
                             hint="`rollout resume` continues a halted rollout")
        wave = open_wave(rollout)
        if not force:
            _check_ready(rollout, wave, store.counts(rollout)[wave], now)
        if wave + 1 == len(rollout.waves):
            changed = replace(rollout, state="complete", reason="every wave passed")
        else:
            waves = list(rollout.waves)
            waves[wave + 1] = replace(waves[wave + 1], opened=now)
            changed = replace(rollout, waves=tuple(waves))
        changed = with_grants(changed, store)
        signer.sign(site, ref, stamp, changed)
        record_grants(store, changed, now)
    return changed


def _check_ready(rollout: Rollout, number: int, counts: WaveCounts, now: int) -> None:
    reason = not_ready(rollout.waves[number], counts, now)
    if reason:
        raise BuildError(f"wave {number + 1} ({rollout.waves[number].name}) {reason}",
                         hint="wait, or `rollout advance --force` to open it anyway")


def not_ready(wave: Wave, counts: WaveCounts, now: int) -> str | None:
    """Why the wave may not be followed by the next one yet, or None."""
    opened = wave.opened if wave.opened is not None else now
    if now - opened < wave.soak_seconds:
        return f"has soaked {now - opened}s of its {wave.soak_seconds}s"
    if counts.offered == 0:
        return "has no device that reported (is the collector reachable, and is this its --db?)"
    share = 100.0 * counts.green / counts.offered
    if share < wave.success_threshold:
        return (f"has {counts.green} of {counts.offered} devices green ({share:.1f}%), under "
                f"its success threshold {wave.success_threshold:g}%")
    return None


def over_halt_threshold(wave: Wave, counts: WaveCounts) -> str | None:
    """Why the wave's rollbacks halt the rollout, or None: more than its halt threshold of
    the devices that staged the release rolled back."""
    tried = max(counts.staged, counts.rolled_back)
    if not tried or 100.0 * counts.rolled_back / tried <= wave.halt_threshold:
        return None
    return (f"{counts.rolled_back} of {tried} devices that staged it rolled back, over its "
            f"halt threshold {wave.halt_threshold:g}%")


def halt(site: Site, signer: Signer, ref: str | None, reason: str) -> Rollout:
    with statements_lock(site.root):
        ref, stamp, rollout = site.statement(ref)
        if rollout.state == "halted":
            return rollout
        changed = replace(rollout, state="halted", reason=reason)
        signer.sign(site, ref, stamp, changed)
    return changed


def resume(site: Site, signer: Signer, ref: str | None, store: Store | None = None,
           now: int = 0) -> Rollout:
    """Active again, with the open waves as they were; their counts stay (a wave that goes
    on rolling back halts again). With the collector's store, budget slots a halt kept
    from waiting devices are granted in the same statement."""
    with statements_lock(site.root):
        ref, stamp, rollout = site.statement(ref)
        if rollout.state != "halted":
            raise BuildError(f"rollout {rollout.id} is {rollout.state}, not halted")
        changed = replace(rollout, state="active", reason="")
        if store is not None:
            changed = with_grants(changed, store)
        signer.sign(site, ref, stamp, changed)
        if store is not None:
            record_grants(store, changed, now)
    return changed


def halt_if_over(site: Site, store: Store, signer: Signer, verdict: Verdict) -> str | None:
    """The collector, after a rolled-back verdict: halt when the wave's rolled-back share of
    the devices that staged passed its halt threshold; the reason, or None."""
    wave = verdict.wave
    with statements_lock(site.root):
        try:
            ref, stamp, rollout = site.statement(verdict.ref)
        except BuildError:
            return None
        if rollout.id != verdict.rollout or rollout.commit != verdict.commit or \
                rollout.state != "active" or not 0 <= wave < len(rollout.waves):
            return None
        over = over_halt_threshold(rollout.waves[wave], store.counts(rollout)[wave])
        if over is None:
            return None
        reason = f"wave {wave + 1}: {over}"
        signer.sign(site, ref, stamp, replace(rollout, state="halted", reason=reason))
    return reason


def status(site: Site, store: Store, ref: str | None, now: int, *,
           holder_silent_after: int = HOLDER_SILENT_AFTER) -> dict[str, Any]:
    ref, stamp, rollout = site.statement(ref)
    counts = store.counts(rollout)
    waves = []
    for number, (wave, count) in enumerate(zip(rollout.waves, counts, strict=True)):
        waves.append({"wave": number + 1, "name": wave.name, "selector": wave.selector(),
                      "open": wave.opened is not None, "opened": wave.opened,
                      "soaked_seconds": now - wave.opened if wave.opened else 0,
                      "soak_seconds": wave.soak_seconds,
                      "success_threshold": wave.success_threshold,
                      "halt_threshold": wave.halt_threshold,
                      "offered": count.offered, "downloaded": count.downloaded,
                      "staged": count.staged, "green": count.green,
                      "rolled_back": count.rolled_back, "silent": count.silent,
                      "failed_checks": count.failed_checks})
    return {"ref": ref, "rollout": rollout.id, "commit": rollout.commit,
            "state": rollout.state, "reason": rollout.reason, "statement_issued": stamp.issued,
            "statement_expires": stamp.expires, "waves": waves,
            "refused": store.refusals(), "duplicates": store.duplicates(),
            "budget": budget_status(rollout, store, now, holder_silent_after),
            "held": held_devices(rollout, store)}


def status_text(report: dict[str, Any]) -> str:
    lines = [f"rollout {report['rollout']} of {report['commit'][:12]} on {report['ref']}: "
             f"{report['state']}" + (f" ({report['reason']})" if report["reason"] else ""),
             f"  {'wave':<22} {'open':>5} {'offered':>8} {'downloaded':>11} {'staged':>7} "
             f"{'green':>6} {'rolled back':>12} {'silent':>7}"]
    for wave in report["waves"]:
        soak = (f"{wave['soaked_seconds']}s/{wave['soak_seconds']}s" if wave["open"]
                else "no")
        lines.append(f"  {wave['wave']}. {wave['selector']:<19} {soak:>5} {wave['offered']:>8} "
                     f"{wave['downloaded']:>11} {wave['staged']:>7} {wave['green']:>6} "
                     f"{wave['rolled_back']:>12} {wave['silent']:>7}")
        for check, count in sorted(wave["failed_checks"].items()):
            lines.append(f"       failed check ({count}): {check}")
    lines.extend(budget_text(report.get("budget")))
    for device in report.get("held", []):
        lines.append(f"  held {device['machine_id']} (wave {device['wave']}): "
                     f"{device['reason']}")
    refused = ", ".join(f"{k} {v}" for k, v in report["refused"].items()) or "none"
    lines.append(f"  refused verdicts: {refused}; resent or replayed copies of recorded "
                 f"ones: {report['duplicates']}")
    return "\n".join(lines)
