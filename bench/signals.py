"""`python -m bench signals`: SIGTERM and SIGKILL at random moments of each long command.

For each command (build-image, deltas, publish, device simulate, composer compose; `--only
NAME` for some of them) and each signal, ROUNDS times: the command runs in a build directory
of its own, gets the signal after a random share of its measured unkilled time, and then the
checks a CI system relies on are made: the exit (143 and one `terminated` line for SIGTERM),
no process of the run left 5 s later (anything whose command line names the build directory,
gpg-agents included), and a rerun of the same command that completes (after SIGKILL it takes
the lock over and stops the agents the killed run left). `composer compose` runs against the
in-repo fake osbuild-composer (tests/imagebuilder/fake_weldr.py): a fresh one in a thread of this
process for each run and its rerun, stopped afterwards (bench/signals_composer.py); its waits
are bounded per answer and per compose as well (tests/imagebuilder/test_bounds.py).
"""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, NamedTuple

from bench.signals_composer import Weldr, compose_argv, weldr

ROOT = Path(__file__).resolve().parent.parent
SIGNALS = {"TERM": signal.SIGTERM, "KILL": signal.SIGKILL}
NAMES = ("build-image", "deltas", "publish", "device simulate", "composer compose")


def _cli(release: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "builder", "--release", str(release), *args]


def _no_service(work: Path) -> AbstractContextManager[object]:
    return nullcontext()


class Command(NamedTuple):
    prepare: Callable[[Path], list[str]]    # work -> the command's argv (a rerun runs the same)
    # work -> what must run around the run in `work` and its rerun (a service), then stop
    service: Callable[[Path], AbstractContextManager[object]] = _no_service


def commands(release: Path, base: Path, service: Weldr) -> dict[str, Command]:
    """name -> how to run it in a work directory."""
    def build_image(work: Path) -> list[str]:
        return _cli(release, "build-image", "--build-dir", str(work / "build"))

    def copy_of_base(work: Path) -> Path:
        if not (work / "build").exists():
            shutil.copytree(base, work / "build", symlinks=True)
        return work / "build"

    def deltas(work: Path) -> list[str]:
        return _cli(release, "deltas", "--build-dir", str(copy_of_base(work)))

    def publish(work: Path) -> list[str]:
        return _cli(release, "publish", "--build-dir", str(copy_of_base(work)), "--to",
                    str(work / "target"))

    def simulate(work: Path) -> list[str]:
        return _cli(release, "device", "simulate", "--scenario", "good-update",
                    "--build-dir", str(work / "build"))

    return {"build-image": Command(build_image), "deltas": Command(deltas),
            "publish": Command(publish), "device simulate": Command(simulate),
            "composer compose": Command(compose_argv(service, _cli, copy_of_base),
                                        service.serving)}


def left_behind(work: Path) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(work) in cmdline:
            found.append(f"{proc.name}: {cmdline[:160]}")
    return found


def one_run(argv: list[str], signum: int | None, after: float) -> tuple[int, str, float]:
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    if signum is not None:
        try:
            proc.wait(timeout=after)
        except subprocess.TimeoutExpired:
            proc.send_signal(signum)
    _, err = proc.communicate(timeout=1800)
    return proc.returncode, err, time.monotonic() - started


def killed_run(command: Command, work: Path, signum: int, after: float) -> dict[str, Any]:
    """The command in `work`, `signum` after `after` seconds, the checks, then the rerun."""
    with command.service(work):
        argv = command.prepare(work)
        code, err, _ = one_run(argv, signum, after)
        time.sleep(5)
        left = left_behind(work)
        rerun, rerr, _ = one_run(argv, None, 0)
    lines = err.strip().splitlines()
    return {"signal_after_s": round(after, 2), "exit": code,
            "last_line": lines[-1] if lines else "", "left_after_5s": left, "rerun_exit": rerun,
            "rerun_left": left_behind(work),
            "rerun_error": rerr.strip().splitlines()[-1:] if rerun else []}


def measure(rounds: int, release: Path, out: Path,
            only: Collection[str] = ()) -> dict[str, Any]:
    scratch = out / "signals"
    shutil.rmtree(scratch, ignore_errors=True)
    base = scratch / "base"
    code, err, _ = one_run(_cli(release, "build-image", "--build-dir", str(base)), None, 0)
    if code != 0:
        raise SystemExit(f"bench signals: the base build failed:\n{err[-2000:]}")
    rng = random.Random(20261126)
    results: dict[str, Any] = {}
    with weldr(release, scratch) as service:
        for name, command in commands(release, base, service).items():
            if only and name not in only:
                continue
            clean = scratch / name.replace(" ", "-") / "clean"
            with command.service(clean):
                code, err, seconds = one_run(command.prepare(clean), None, 0)
            if code != 0:
                raise SystemExit(f"bench signals: {name} fails unkilled:\n{err[-2000:]}")
            for label, signum in SIGNALS.items():
                rows = [killed_run(command, scratch / name.replace(" ", "-") / f"{label}-{i}",
                                   signum, rng.uniform(0.05, 0.95) * seconds)
                        for i in range(rounds)]
                results[f"{name} / SIG{label}"] = {"unkilled_seconds": round(seconds, 1),
                                                   "rounds": rows}
    shutil.rmtree(scratch, ignore_errors=True)
    return results


def report(results: dict[str, Any]) -> str:
    lines = ["signals: a random moment of each command, then a rerun",
             f"  {'command / signal':<28} {'runs':>4} {'exit 143':>8} {'left 5s':>7} "
             f"{'reruns ok':>9}"]
    for key, value in results.items():
        rows = value["rounds"]
        term = sum(1 for r in rows if r["exit"] == 143 and r["last_line"].startswith(
            "terminated (SIGTERM)"))
        finished = sum(1 for r in rows if r["exit"] == 0)
        left = sum(1 for r in rows if r["left_after_5s"] or r["rerun_left"])
        reruns = sum(1 for r in rows if r["rerun_exit"] == 0)
        shown = f"{term}(+{finished} done)" if key.endswith("TERM") else "-"
        lines.append(f"  {key:<28} {len(rows):>4} {shown:>8} {left:>7} {reruns:>9}")
    return "\n".join(lines)
