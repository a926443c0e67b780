"""Mutation testing of the safety-critical modules (`nox -s mutation`), with mutmut 3.

Each module is mutated in a copy of the project (build/mutation/), and only the tests that
aim at it run against its mutants (mutmut maps every function to the tests that call it).
A surviving mutant is a change to a safety check that no test notices: docs/testing.md
lists the survivors of the last full run, each killed by a test since or explained.

    python ci/mutation.py                     # every module below (~1 h on 2 cores)
    python ci/mutation.py builder/updater/index.py   # one module (CI runs a bounded set)

Writes build/mutation/report.json (per module: mutants, killed, survived, score, and the
surviving mutants' names) and exits 1 when a module's score is under --min-score.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "build" / "mutation"

# module -> the tests that aim at it
MODULES: dict[str, list[str]] = {
    "builder/updater/index.py": ["tests/updater/test_index.py"],
    "builder/updater/update_config.py": ["tests/updater/test_update_config.py"],
    "builder/updater/delta_download.py": ["tests/updater/test_delta_download.py"],
    # The cap on the fallback pull, and which remotes it cannot cover.
    "builder/updater/relay.py": ["tests/updater/test_relay.py"],
    # The delta report reads each part's object list through parse_superblock.
    "builder/publish/offline.py": ["tests/publish/test_offline.py",
                                   "tests/publish/test_offline_checks.py",
                                   "tests/publish/test_delta_knobs.py::"
                                   "test_encodings_read_from_a_real_delta"],
    "builder/rpm/payloads.py": ["tests/rpm/test_payloads.py"],
    "builder/release/payload.py": ["tests/release/test_payload.py",
                                   "tests/release/test_release.py"],
    "builder/core/signing.py": ["tests/core/test_signing.py", "tests/ci/test_import_key.py"],
    "builder/rpm/rpm_signing.py": ["tests/rpm/test_rpm_signing.py"],
    # The read-back checks; the tests that build ISOs without damaging them run too long
    # for every mutant (each builds several ISOs).
    "builder/installer/read_back.py": ["tests/installer/test_iso.py", "-k",
                                    "read_back or verification"],
    "builder/compose/commit.py": ["tests/compose/test_commit_publish.py"],
    "builder/publish/deltas.py": ["tests/publish/test_delta_stage.py",
                                  "tests/publish/test_delta_knobs.py"],
    "builder/compose/rootfs.py": ["tests/compose/test_package_verification.py"],
    "builder/core/download.py": ["tests/core/test_download.py"],
    # The publish's summary dates; its other tests publish the composed pair (minutes).
    "builder/publish/upload.py": ["tests/publish/test_upload.py", "-k",
                                  "dated or keeps_the_published"],
    # The embedded image cache: each image findable by the digest its reference pins, and
    # the image of its architecture (issue 46).
    "builder/compose/containers.py": ["tests/compose/test_containers.py",
                                      "tests/compose/test_store_checks.py"],
}
# Modules of which only some functions are safety checks: only those are mutated (the rest
# builds the tree and is tested by whole composes, minutes per run).
MUTATED_FUNCTIONS: dict[str, list[str]] = {
    # The ref moves last, the published summary, the skip of an unchanged compose, the lock.
    "builder/compose/commit.py": ["kill_at", "compose_lock", "_check_same_image",
                                  "_check_not_older",
                                  "compose_inputs", "compose_identity", "_inputs_record",
                                  "_composed_inputs", "_already_composed", "_why_compose",
                                  "_record_inputs", "_publish_summary", "_publish",
                                  "_publish_commit"],
    # Every locked RPM present with its sha256, downloaded from a URL repository if need be.
    "builder/compose/rootfs.py": ["verify_packages", "_download"],
    "builder/publish/upload.py": ["stamp_summary", "_published_signature"],
    "builder/compose/containers.py": ["verify_store", "_check_stored_config", "_big_data"],
}
# What the tests read besides the package (specs, templates, schemas, the sample release).
ALSO_COPY = ["specs", "blueprints", "kickstart", "schemas", "release.yaml", "bench", "ci"]
# Code mutmut cannot follow is changed by hand, one line at a time, and its tests must fail
# for each: greenboot's decision points (bash), and the updater's checks that run on the
# simulated device inside the microshift-update zip application (a subprocess, which
# mutmut's trampolines neither see nor switch).
GREENBOOT = "specs/sources/microshift-greenboot/usr"
FUNCTIONS = f"{GREENBOOT}/share/microshift/functions/greenboot.sh"
CHECK = f"{GREENBOOT}/lib/greenboot/check/required.d/40-microshift-running-check.sh"
Mutant = tuple[str, str, str]  # file, original, mutant
GREENBOOT_MUTANTS: list[Mutant] = [
    (FUNCTIONS, "local timeout=$(( base * (max - counter) ))",
     "local timeout=$(( base * (max - counter + 1) ))"),
    (FUNCTIONS, "local timeout=$(( base * (max - counter) ))", "local timeout=$(( base ))"),
    (FUNCTIONS, 'if [ "${timeout}" -le 0 ] ; then', 'if [ "${timeout}" -lt 0 ] ; then'),
    (FUNCTIONS, "counter=$(( max - 1 ))", "counter=0"),
    (FUNCTIONS, '[[ ! "${base}" =~ ^[1-9][0-9]{0,3}$ ]]', '[[ ! "${base}" =~ ^[0-9]+$ ]]'),
    (FUNCTIONS, '[[ ! "${max}" =~ ^[1-9]$ ]]', '[[ ! "${max}" =~ ^[0-9]+$ ]]'),
    (FUNCTIONS, 'if [ "${now}" -ge "${deadline}" ] ; then', 'if false ; then'),
    (FUNCTIONS, '[ "${body}" = "ok" ] || return 1', 'true'),
    # The API check asks both endpoints (issue 46: ignoring /readyz went unnoticed).
    (FUNCTIONS, "    for endpoint in /readyz /livez ; do", "    for endpoint in /livez ; do"),
    (FUNCTIONS, "    for endpoint in /readyz /livez ; do", "    for endpoint in /readyz ; do"),
    (FUNCTIONS, '[[ ! "${kind}" =~ ^(deployment|daemonset|statefulset)$ ]]', 'false'),
    (CHECK, 'true)" = "failed" ] ; then', 'true)" = "never" ] ; then'),
    (CHECK, '[ "$(systemctl is-active microshift.service 2>/dev/null || true)" = "active" ]',
     'true'),
    (CHECK, '!= "enabled" ] ; then', '= "never" ] ; then'),
    (CHECK, 'if ! WORKLOADS="$(health_workloads)" ; then', 'if ! WORKLOADS="" ; then'),
]
APPLY, RUN = "builder/updater/apply.py", "builder/updater/run.py"
PULL, STATE = "builder/updater/pull.py", "builder/updater/state.py"
UPDATER_MUTANTS: list[Mutant] = [
    (APPLY, "    if new < old:", "    if False:"),
    (APPLY, "    if proc.returncode != 0:", "    if False:"),
    (APPLY, '"--set=gpg-verify=true"', '"--set=gpg-verify=false"'),
    (APPLY, "        forget(system, commit)\n        raise UpdateRefused(f\"commit {commit[:12]} "
     "does not", "        raise UpdateRefused(f\"commit {commit[:12]} does not"),
    (APPLY, "    verify_commit(system, commit, remote, keyrings, scratch)\n", "\n"),
    (RUN, "        if not self.config.allow_downgrade:", "        if False:"),
    (RUN, 'if self.system.remote_option(remote, "gpg-verify") == "false":', "if False:"),
    (RUN, "if delta is not None and delta.size > self.config.staging_max_bytes:", "if False:"),
    (RUN, "        elif target in self._rolled_back():", "        elif False:"),
    (RUN, "        if target == booted.checksum:", "        if False:"),
    # The capped pull: around the relay, or no relay at all.
    (PULL, "commit = apply.pull(system, remote, ref, relay.url, patience=patience)",
     "commit = apply.pull(system, remote, ref, patience=patience)"),
    (PULL, "    if why_not:", "    if True:"),
]
# Issue 42's safety checks, against the hostile suite: the booted or staged commit never
# staged again, no reboot into the booted deployment, damaged state never read as empty,
# the run's deadline, children that die with the run.
HOSTILE_MUTANTS: list[Mutant] = [
    (RUN, "        if index is None and self._nothing_new(booted, commit, None):",
     "        if False:"),
    (RUN, "        if pending is None or pending == booted.checksum:", "        if False:"),
    (STATE, "        raise DamagedState(path, exc.problem if not exc.field else",
     "        return None\n        raise DamagedState(path, exc.problem if not exc.field else"),
    ("builder/updater/fetch.py", "        if patience.deadline is not None and now >= "
     "patience.deadline:", "        if False:"),
    ("builder/updater/processes.py", '    return (setpriv, "--pdeathsig", "KILL", "--") if '
     'b"--pdeathsig" in proc.stdout else ()', "    return ()"),
    ("builder/updater/delta_download.py", "            elif response.status >= 500:",
     "            elif response.status >= 400:"),
]
HAND_MUTANTS: dict[str, tuple[list[str], list[Mutant]]] = {  # group: tests, mutants
    "greenboot": (["tests/device/test_greenboot.py"], GREENBOOT_MUTANTS),
    "updater-on-device": (["tests/device/test_update.py"], UPDATER_MUTANTS),
    "updater-hostile": (["tests/device/test_hostile.py", "tests/updater/test_stage.py",
                         "tests/updater/test_processes.py"], HOSTILE_MUTANTS),
}
KILLED = {1, 3, -24, 24, 152, 255, 36, -9}   # mutmut: test failure, error or timeout
HAND_TIMEOUT = 1200   # seconds for a hand mutant's tests: more than they take unmutated
SURVIVED = {0}
NO_TESTS = {5, 33}


def copy_project(work: Path) -> None:
    """The tracked files, as they are in the working tree, into `work` (emptied first)."""
    shutil.rmtree(work, ignore_errors=True)
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, work / name)


def prepare(module: str) -> Path:
    """A copy of the project whose setup.cfg mutates `module` alone."""
    work = WORK / module.replace("/", "_").removesuffix(".py")
    copy_project(work)
    config = ["[mutmut]", "source_paths=builder/", f"only_mutate={module}",
              "pytest_add_cli_args_test_selection=",
              *[f"    {test}" for test in MODULES[module]], "also_copy=",
              *[f"    {name}" for name in ALSO_COPY]]
    (work / "setup.cfg").write_text("\n".join(config) + "\n")
    return work


def selection(module: str) -> list[str]:
    """mutmut's name patterns for the mutants of `module` to run (none: all of them)."""
    dotted = module.removesuffix(".py").replace("/", ".")
    return [f"{dotted}.x_{function}__mutmut_*"
            for function in MUTATED_FUNCTIONS.get(module, [])]


def selected(codes: dict[str, int | None], patterns: list[str]) -> dict[str, int | None]:
    if not patterns:
        return codes
    return {name: code for name, code in codes.items()
            if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)}


def run(module: str, jobs: int) -> dict[str, Any]:
    work = prepare(module)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    patterns = selection(module)
    # The console script, not `-m mutmut`: the trampolines import mutmut.__main__ again.
    mutmut = str(Path(sys.executable).with_name("mutmut"))
    proc = subprocess.run([mutmut, "run", "--max-children", str(jobs), *patterns],
                          cwd=work, env=env, capture_output=True, text=True, check=False)
    meta = work / "mutants" / f"{module}.meta"
    if not meta.is_file():
        sys.exit(f"mutmut made no results for {module} (exit {proc.returncode}):\n"
                 f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    codes = selected(json.loads(meta.read_text())["exit_code_by_key"], patterns)
    if not codes:
        sys.exit(f"no mutants of {module} match {patterns} "
                 "(ci/mutation.py MUTATED_FUNCTIONS is stale)")
    return tally(module, codes, proc.returncode)


def tally(module: str, codes: dict[str, int | None], returncode: int) -> dict[str, Any]:
    """The score of one module from mutmut's exit code per mutant."""
    # An interrupted run leaves mutants without a result: a score over part of them is no score.
    unknown = sorted(name for name, code in codes.items()
                     if code not in KILLED | SURVIVED | NO_TESTS)
    if unknown:
        sys.exit(f"mutmut left {len(unknown)} of {len(codes)} mutants of {module} without a "
                 f"known result (exit {returncode}; first: {unknown[0]} -> "
                 f"{codes[unknown[0]]}): run it again")
    survived = sorted(name for name, code in codes.items() if code in SURVIVED)
    untested = sorted(name for name, code in codes.items() if code in NO_TESTS)
    killed = sum(1 for code in codes.values() if code in KILLED)
    total = len(codes)
    return {"module": module, "mutants": total, "killed": killed, "survived": survived,
            "no_tests": untested, "score": round(killed / total, 4) if total else 1.0}


def run_hand_mutants(group: str) -> dict[str, Any]:
    """Each hand mutant of `group` applied to a copy; the group's tests must fail."""
    work = WORK / group
    tests, mutants = HAND_MUTANTS[group]
    survived, killed = [], 0
    for index, (file, original, mutant) in enumerate(mutants):
        copy_project(work)
        path = work / file
        text = path.read_text()
        if text.count(original) != 1:
            sys.exit(f"{file}: {original!r} should occur once (ci/mutation.py is stale)")
        path.write_text(text.replace(original, mutant))
        try:
            returncode = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p",
                                         "no:cacheprovider", *tests], cwd=work,
                                        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
                                        capture_output=True, text=True, check=False,
                                        timeout=HAND_TIMEOUT).returncode
        except subprocess.TimeoutExpired:
            returncode = -9   # a mutant that makes a bounded wait unbounded: killed
        name = f"{group}.{index}: {Path(file).name}: {original.strip()} -> {mutant.strip()}"
        if returncode == 0:
            survived.append(name)
        else:
            killed += 1
        print(f"      {'killed' if returncode else 'SURVIVED'}: {name}", flush=True)
    total = len(mutants)
    return {"module": f"{group} (by hand)", "mutants": total, "killed": killed,
            "survived": survived, "no_tests": [], "score": round(killed / total, 4)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", default=[*MODULES, *HAND_MUTANTS],
                        choices=[*MODULES, *HAND_MUTANTS], metavar="MODULE")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--min-score", type=float, default=0.90)
    args = parser.parse_args()
    results = []
    for module in args.modules:
        tests = MODULES[module] if module in MODULES else HAND_MUTANTS[module][0]
        print(f"==> mutating {module} (tests: {', '.join(tests)})", flush=True)
        result = run_hand_mutants(module) if module in HAND_MUTANTS else run(module, args.jobs)
        results.append(result)
        print(f"<== {module}: {result['killed']}/{result['mutants']} killed "
              f"({float(result['score']):.1%}), {len(result['survived'])} survived, "
              f"{len(result['no_tests'])} reached by no test", flush=True)
        for name in result["survived"]:
            print(f"      survived: {name}")
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "report.json").write_text(json.dumps(results, indent=2) + "\n")
    low = [r["module"] for r in results if float(r["score"]) < args.min_score]
    if low:
        print(f"mutation score under {args.min_score:.0%}: {', '.join(low)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
