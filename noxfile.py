"""Sessions: build-image (the main job), tests, realscale, vm, fleet, fuzz, lint, bench.

Every session installs the host tools it needs through ci/install-host-tools.sh (fast when
they are present) and the project into its own virtualenv.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True
PYTHON = "3.11"


def _host_tools(session: nox.Session) -> None:
    session.run("bash", "ci/install-host-tools.sh", external=True)


@nox.session(name="build-image", python=PYTHON)
def build_image(session: nox.Session) -> None:
    """Run the whole chain for the sample release (or --release FILE) into ./build."""
    _host_tools(session)
    session.install("-e", ".")
    args = session.posargs or ["--build-dir", "build"]
    session.run(*_as_root(session), "python", "-m", "builder", "build-image", *args,
                external=True)


def _as_root(session: nox.Session) -> list[str]:
    """The compose installs RPMs with `rpm --root` and records file ownership: it runs as
    root, as osbuild does. A user with sudo gets it through sudo, with this session's PATH."""
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") is None:
        session.error("build-image composes as root (rpm --root, file ownership): run it as "
                      "root, or install sudo")
    session.log("build-image runs through sudo: the compose installs RPMs with rpm --root")
    path = os.pathsep.join([str(session.bin), os.environ.get("PATH", os.defpath)])
    return ["sudo", "env", f"PATH={path}"]


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Unit tests and the integration tier that runs the real host tools, one pytest worker
    per core (pytest-xdist; a test file stays on one worker, so its module fixtures are made
    once). `nox -s tests -- -n 0 ...` runs them in one process."""
    _host_tools(session)
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", "--numprocesses=auto", "--dist=loadfile",
                *(session.posargs or ["-q"]), env={"PYTHONDONTWRITEBYTECODE": "1"})


@nox.session(python=PYTHON)
def realscale(session: nox.Session) -> None:
    """The real-scale update tier (issue 11): real releases with a 96 MB executable and
    520 MB of image content. `nox -s realscale` composes 4 releases (deltas from 3 previous
    commits, ~45 min on 2 cores); `nox -s realscale -- 2` only the adjacent pair (CI)."""
    _host_tools(session)
    session.install("-e", ".[test]")
    releases = session.posargs[0] if session.posargs else "4"
    session.run("python", "-m", "pytest", "tests/realscale", "-q", "-rs",
                env={"PYTHONDONTWRITEBYTECODE": "1", "MSEB_REALSCALE": "1",
                     "MSEB_REALSCALE_RELEASES": releases})


@nox.session(python=PYTHON)
def vm(session: nox.Session) -> None:
    """The VM tier (issue 31): the pipeline's own disk image boots under QEMU (KVM where it
    works, TCG otherwise) and updates itself; every scenario's (commit, verdict, boot_counter)
    sequence is held to the simulated sysroot's. `nox -s vm` runs good-update, bad-update and
    lte-update on the UEFI image and bad-update on the BIOS one (~35 min under TCG on 2
    cores), good-update and bad-update on the arm64 image (AAVMF, emulated: see
    docs/benchmarks.md), each firmware (OVMF, SeaBIOS, arm64's AAVMF) into GRUB's menu,
    OVMF enforcing Secure Boot (`-- secure_boot_enforced`: the signed chain to the kernel,
    the unsigned GRUB refused), the three scenarios again on an image-mode (bootc) device
    (ids SCENARIO-image), and an ostree device's migration to its release's image and back
    (`-- migrate`); `nox -s vm -- bad-update` every firmware's, architecture's and mode's
    rollback, `-- bad-update-uefi bad-update-image` x86_64's UEFI one on an ostree and an
    image-mode device (CI), `-- aarch64` arm64's (scheduled CI)."""
    _host_tools(session)
    session.install("-e", ".[test]")
    selected = " or ".join(session.posargs) if session.posargs else ""
    # Two workers: a TCG guest keeps one core busy, so two scenarios boot side by side.
    session.run("python", "-m", "pytest", "tests/vm/test_vm_scenarios.py",
                "tests/vm/test_firmware_boot.py", "-q", "-rs", "--numprocesses=2",
                "--dist=loadgroup",
                *(["-k", selected] if selected else []),
                env={"PYTHONDONTWRITEBYTECODE": "1", "MSEB_VM": "1"})


@nox.session(python=PYTHON)
def fleet(session: nox.Session) -> None:
    """The fleet rollout tier (issues 33, 43): a bad and a good release rolled out in waves to
    20 simulated devices, a halt clicked in the console holding the rest of them, and the
    disruption budget and group windows (always 4 devices, 2 sites); `-- N` sets another
    size (CI: 4). `nox -s tests` leaves the tier out. What the fleet did is written to
    build/fleet.json (docs/benchmarks.md)."""
    _host_tools(session)
    session.install("-e", ".[test]")
    devices = session.posargs[0] if session.posargs else "20"
    session.run("python", "-m", "pytest", "tests/rollout/test_fleet.py",
                "tests/rollout/test_console_fleet.py", "tests/rollout/test_budget_fleet.py",
                "-q", "-rs", "--durations=0",
                env={"PYTHONDONTWRITEBYTECODE": "1", "MSEB_FLEET_DEVICES": devices,
                     "MSEB_FLEET_REPORT": "build/fleet.json"})


@nox.session(python=PYTHON)
def fuzz(session: nox.Session) -> None:
    """The property-based tests (issue 15) with the long hypothesis profile: at least 10,000
    examples per input (`-- N` sets another count; CI runs a bounded one)."""
    _host_tools(session)
    session.install("-e", ".[test]")
    examples = session.posargs[0] if session.posargs else "10000"
    session.run("python", "-m", "pytest", "-m", "fuzz", "-q",
                "--hypothesis-profile", "fuzz", "--hypothesis-show-statistics",
                env={"PYTHONDONTWRITEBYTECODE": "1", "MSEB_FUZZ_EXAMPLES": examples})


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff, mypy --strict, the import layering (import-linter) and no import cycles, counting
    imports inside functions (ci/import_cycles.py)."""
    session.install("-e", ".[lint]")
    # The OVN-K and TopoLVM component plugins are Python scripts without a .py suffix.
    # So is the SAMPLE bootc stand-in of the simulated device.
    plugins = [str(p) for p in [*Path("specs/sources").glob("*/usr/lib/microshift/*/*/plugin"),
                                *Path("builder/device/standins").iterdir()]
               if p.read_text().startswith("#!/usr/bin/python3")]
    session.run("ruff", "check", "builder", "tests", "bench", "ci", "noxfile.py", *plugins)
    session.run("mypy")
    session.run("lint-imports")  # imports flow one way: commands -> stages -> core
    session.run("python", "ci/import_cycles.py", "builder")  # imports inside functions too


@nox.session(python=PYTHON)
def mutation(session: nox.Session) -> None:
    """Mutation testing of the safety-critical modules with mutmut (docs/testing.md):
    `nox -s mutation` mutates every module in ci/mutation.py (~1 h on 2 cores);
    `nox -s mutation -- builder/updater/index.py` one. Fails under 90% killed."""
    _host_tools(session)
    session.install("-e", ".[test]", "mutmut==3.8.1")
    session.run("python", "ci/mutation.py", *session.posargs,
                env={"PYTHONDONTWRITEBYTECODE": "1"})


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks; results are recorded by hand in docs/benchmarks.md."""
    _host_tools(session)
    session.install("-e", ".[test]")
    out = os.environ.get("BENCH_OUT", "build/bench")
    session.run("python", "-m", "bench", "--out", out, *session.posargs)


@nox.session(python=PYTHON)
def stress(session: nox.Session) -> None:
    """The suite 5 times in a row while build-image runs in a loop beside it (ci/stress.py;
    about 1 to 2 hours on 2 cores): timing races show up as failures under load.
    `nox -s stress -- --runs 2 -- tests/device` narrows it."""
    _host_tools(session)
    session.install("-e", ".[test]")
    session.run("python", "ci/stress.py", *session.posargs,
                env={"PYTHONDONTWRITEBYTECODE": "1"})
