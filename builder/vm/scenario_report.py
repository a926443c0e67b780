"""What a VM scenario must show, and its report (`--report-json`)."""

from __future__ import annotations

import json
from dataclasses import asdict

from builder.context import Context
from builder.vm.migration import SAY_DONE, SAY_KEPT
from builder.vm.releases import BuiltPair
from builder.vm.scenarios import MARKER_TEXT, VmOptions, VmOutcome, VmScenario, run_vm_scenario


def run_and_check(ctx: Context, scenario: VmScenario, options: VmOptions) -> VmOutcome:
    """Run the scenario, then hold it to what it must show; each check says PASS or FAIL."""
    outcome = run_vm_scenario(ctx, scenario, options)
    expect_outcome(scenario, options, outcome)
    for what, ok in outcome.checks:
        ctx.progress.info(f"{'PASS' if ok else 'FAIL'}: {what}")
    return outcome


def expect_outcome(scenario: VmScenario, options: VmOptions, outcome: VmOutcome) -> None:
    pair, boots, final = outcome.pair, outcome.boots, outcome.final
    assert pair is not None
    if outcome.migration is not None:
        _expect_migration(outcome, pair, options.max_boot_attempts)
        return
    expect = outcome.expect
    first, last = boots[0], boots[-1]
    booted = outcome.booted
    expect("v1 boots first and greenboot says GREEN",
           booted(first) == pair.v1 and first.verdict == "green")
    expect("the last boot is GREEN, with boot_success=1 and no boot_counter in grubenv",
           last.verdict == "green" and final.grubenv.get("boot_success") == "1"
           and "boot_counter" not in final.grubenv)
    expect("v1's own microshift-update staged v2 and rebooted into it",
           any(line.startswith(f"staged {_short(pair.v2)}") for line in first.updater)
           and "rebooting into the staged deployment" in first.updater)
    expect("MicroShift's data marker from v1 is intact", final.marker == MARKER_TEXT)
    if scenario.bad_v2:
        _expect_rollback(outcome, pair, options.max_boot_attempts)
    else:
        _expect_update(outcome, pair)
    if scenario.cuts:
        served = outcome.served
        expect(f"the link was cut {scenario.cuts} times in the delta file and no delta byte "
               f"crossed it twice ({served.get('duplicate_delta_bytes')} duplicate bytes)",
               served.get("cut_transfers") == scenario.cuts
               and served.get("duplicate_delta_bytes") == 0)


def _expect_rollback(outcome: VmOutcome, pair: BuiltPair, attempts: int) -> None:
    boots, final, expect, booted = outcome.boots, outcome.final, outcome.expect, outcome.booted
    v2_boots = boots[1:-1]
    expect(f"v2 booted {attempts} times, RED each time, with boot_counter "
           f"{', '.join(str(n) for n in range(attempts - 1, -1, -1))}",
           [(booted(b), b.verdict, b.boot_counter) for b in v2_boots]
           == [(pair.v2, "red", n) for n in range(attempts - 1, -1, -1)])
    last = boots[-1]
    expect("then GRUB fell back to v1 (entry 1, boot_counter -1), GREEN",
           (booted(last), last.entry, last.boot_counter, last.verdict)
           == (pair.v1, 1, -1, "green"))
    if outcome.images is None:
        expect("v2 is undeployed: v1 is the only deployment", final.deployments == [pair.v1])
    else:
        # bootc rollback reorders: v1 the default again, v2 kept as the rollback deployment.
        expect("bootc rolled back: v1's deployment and v2's as its rollback remain",
               len(final.deployments) == 2 and boots[0].commit in final.deployments)
    expect(f"MicroShift's data is v1's again, restored from its backup (version "
           f"{final.data_version})", final.data_version == _version(pair.v1_version))
    expect("the updater does not stage the rolled-back v2 again",
           any("was rolled back by greenboot" in line for line in last.updater))


def _expect_update(outcome: VmOutcome, pair: BuiltPair) -> None:
    boots, final, expect = outcome.boots, outcome.final, outcome.expect
    expect("v2 booted once, GREEN, and stays",
           [(outcome.booted(b), b.verdict) for b in boots[1:]] == [(pair.v2, "green")])
    # The deployments are commits; in image mode, the ones v1's and v2's images became.
    expect("v2 is the default deployment, v1 the rollback",
           sorted(final.deployments) == sorted({boots[0].commit or "", boots[-1].commit or ""}))
    expect(f"MicroShift's data now belongs to v2 (version {final.data_version})",
           final.data_version == _version(pair.v2_version))


def _expect_migration(outcome: VmOutcome, pair: BuiltPair, attempts: int) -> None:
    boots, final, expect = outcome.boots, outcome.final, outcome.expect
    assert outcome.migration is not None
    image = outcome.migration.images.v1
    expect("three boots: the commit, the image, the commit", len(boots) == 3)
    if len(boots) != 3:
        return
    first, switched, back = boots
    expect("v1 boots first from its ostree commit (no image), GREEN",
           (first.commit, first.image, first.verdict) == (pair.v1, None, "green"))
    expect("the admin's `bootc switch --transport oci` staged v1's image; the VM rebooted",
           "switched to the image; rebooting" in first.admin and first.ended == "reboot")
    expect(f"v1's image booted next as a deployment of its own, GREEN, with greenboot's "
           f"boot counter armed ({attempts - 1})",
           (switched.image, switched.verdict, switched.boot_counter)
           == (image, "green", attempts - 1) and switched.commit not in (None, pair.v1))
    expect("the image came up with the ostree deployment's /etc change and MicroShift's "
           "data", SAY_KEPT in switched.admin)
    expect("`bootc rollback` returned the device to the ostree commit: GREEN, no counter",
           (back.commit, back.image, back.verdict, back.boot_counter, back.entry)
           == (pair.v1, None, "green", None, 0) and back.admin[-1:] == [SAY_DONE])
    expect("the commit's and the image's deployments remain; grubenv boot_success=1",
           final.deployments == sorted({pair.v1, switched.commit or ""})
           and final.grubenv.get("boot_success") == "1"
           and "boot_counter" not in final.grubenv)
    expect(f"MicroShift's data marker and v1's data (version {final.data_version}) are kept",
           final.marker == MARKER_TEXT and final.data_version == _version(pair.v1_version))


def _short(booted: str) -> str:
    """How the updater's log names a commit (12 hex) or an image (sha256: and 12 hex)."""
    return booted[:19] if booted.startswith("sha256:") else booted[:12]


def _version(evr: str) -> str:
    """MicroShift's own version (what it writes into its data) of a release's EVR."""
    return evr.rsplit("-", 1)[0]


def sequence(outcome: VmOutcome) -> list[tuple[str | None, str | None, int | None]]:
    """(commit, verdict, boot_counter as GRUB booted) of every boot: what the model must
    repeat."""
    return [(outcome.booted(b), b.verdict, b.boot_counter) for b in outcome.boots]


def outcome_json(outcome: VmOutcome) -> str:
    pair = outcome.pair
    return json.dumps({
        "scenario": outcome.scenario, "passed": outcome.passed,
        "firmware": outcome.firmware, "secure_boot": outcome.secure_boot, "mode": outcome.mode,
        "accel": outcome.accel, "accel_reason": outcome.accel_reason,
        "v1": pair.v1 if pair else None, "v2": pair.v2 if pair else None,
        # Image mode: v1 and v2 are the images' digests, made from these commits.
        "commits": ([outcome.images.commits.v1, outcome.images.commits.v2]
                    if outcome.images else None),
        # migrate: the image the admin switched to.
        "migration_image": outcome.migration.images.v1 if outcome.migration else None,
        "final_commit": outcome.booted(outcome.boots[-1]) if outcome.boots else None,
        "checks": [{"check": what, "ok": ok} for what, ok in outcome.checks],
        "boots": [b.to_dict() for b in outcome.boots],
        "final": asdict(outcome.final), "served": outcome.served,
        "seconds": {k: round(v, 1) for k, v in outcome.seconds.items()},
    }, indent=2)
