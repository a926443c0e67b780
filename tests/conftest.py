"""Fixtures shared by the stages' tests: one build of the sample release's RPMs, and one
pair of composed releases. Integration fixtures run the real host tools."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import tests.hypothesis_profiles  # noqa: F401  (registers and loads the profiles)
from builder.core.children import gpg_agents
from builder.core.runner import Runner
from builder.core.signing import SigningKey
from builder.device.sysroot import release_deployments
from tests.support import requires
from tests.support.cli import PROJECT_ROOT, RELEASE, build_release
from tests.support.keys import ReleaseKey, make_release_key
from tests.support.ostree import ComposedPair, compose_pair

# The real-scale tier composes real releases for ~25-45 minutes: collected only in its own
# session (`nox -s realscale` sets MSEB_REALSCALE=1), never skipped test by test.
collect_ignore = [] if os.environ.get("MSEB_REALSCALE") == "1" else ["realscale"]
# The VM tier boots the pipeline's disk images under QEMU (minutes per scenario under TCG):
# collected only by `nox -s vm` (MSEB_VM=1).
if os.environ.get("MSEB_VM") != "1":
    collect_ignore += ["vm/test_vm_scenarios.py", "vm/test_firmware_boot.py"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under BUILDER_NO_TOOL_SKIPS=1 (CI) a skip for a reason CI can meet is a failure."""
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and requires.strict()) or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ")
    if not requires.allowed(reason):
        report.outcome = "failed"
        report.longrepr = (f"skipped for a reason CI must meet ({requires.STRICT_ENV}=1): "
                           f"{reason}")


@pytest.fixture(scope="session", autouse=True)
def no_gpg_agent_outlives_the_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Tests that run gpg on a build's keyring outside a CLI run (which stops its own agents)
    leave that home's agent running; stop every agent under this session's temporary root."""
    yield
    base = tmp_path_factory.getbasetemp().resolve()
    for agent in gpg_agents():
        try:  # another user's agents (another test run) are none of ours
            home = agent.homedir.resolve()
        except OSError:
            continue
        if home.is_relative_to(base):
            with contextlib.suppress(ProcessLookupError):
                os.kill(agent.pid, signal.SIGTERM)


def _working_tree_status() -> str | None:
    """`git status` of the project, or None when the project is not a checkout's top (a
    copy inside another checkout, as mutation testing makes, is not watched)."""
    root = Path(__file__).resolve().parents[1]
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=root,
                         capture_output=True, text=True, check=False)
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root:
        return None
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=root,
                          capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="session", autouse=True)
def nothing_is_written_into_the_repository() -> Iterator[None]:
    """Tests write into temporary directories only, never into specs/, tests/, ..."""
    before = _working_tree_status()
    yield
    after = _working_tree_status()
    assert before is None or after == before, \
        f"the tests changed the working tree:\n{after}\n(was:\n{before})"


def fingerprint(root: Path) -> list[tuple[str, int, int]]:
    """Every file's path, size and mtime, except GnuPG homes (gpg touches its own files)."""
    return sorted((str(p.relative_to(root)), p.lstat().st_size, p.lstat().st_mtime_ns)
                  for p in root.rglob("*") if not p.is_dir()
                  and not any(part == "gpg" or part.startswith(".gpg") for part in p.parts))


@pytest.fixture
def deletable_sysroots(tmp_path: Path) -> Iterator[None]:
    """ostree makes deployment roots immutable; undo it so pytest can delete tmp_path (for
    the tests that deploy into a simulated device's sysroot)."""
    yield
    release_deployments(tmp_path, Runner())


@pytest.fixture
def closed_port_url() -> Iterator[str]:
    """A TCP URL on which nothing listens: the port stays bound (so no other process can
    take it during the test) but never listens, so a connection is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def silent_server() -> Iterator[str]:
    """Accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(4)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture(scope="module")
def release_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReleaseKey]:
    """A release engineer's signing key (tests/support/keys.py) and its exported public key;
    its gpg-agent is stopped when the module's tests are done."""
    home = tmp_path_factory.mktemp("release-key") / "gnupg"
    key_id = make_release_key(home)
    public = home.parent / "public.asc"
    public.write_bytes(subprocess.run(["gpg", "--homedir", str(home), "--export", "--armor",
                                       key_id], check=True, capture_output=True).stdout)
    yield SigningKey(key_id, home), public
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)


@pytest.fixture(scope="session")
def built_release(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One build of the sample release: DIR/rpms, DIR/repo, DIR/sample-base/{rpms,repo}.
    Shared by many tests, so none may change it: checked when the session ends."""
    build = build_release(tmp_path_factory.mktemp("built-release"))
    before = fingerprint(build)
    yield build
    assert fingerprint(build) == before, f"a test changed the shared build {build}"


@pytest.fixture(scope="session")
def sample_image_build(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One whole `build-image` of the sample release in a fresh directory (in a child
    process, its own umask, time zone and locale): what other builds are compared with.
    Tests must not change it; checked when the session ends."""
    requires.need_root("build-image composes, which runs rpm --root")
    build = tmp_path_factory.mktemp("sample-image-build") / "build"
    proc = subprocess.run(["bash", "-c", 'umask 077; exec "$0" "$@"', sys.executable, "-m",
                           "builder", "--release", str(RELEASE), "build-image", "--build-dir",
                           str(build)], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          env={**os.environ, "TZ": "Pacific/Kiritimati", "LC_ALL": "C.UTF-8"},
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    before = fingerprint(build)
    yield build
    assert fingerprint(build) == before, f"a test changed the shared build {build}"


@pytest.fixture(scope="session")
def composed_pair(built_release: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposedPair]:
    """A copy of built_release where release 1, then release 2, were composed, deltas made.
    Tests must not change it; they copy it (tests/support/ostree.py) when they need to;
    checked when the session ends."""
    requires.need_root("compose runs rpm --root and keeps ownership")
    pair = compose_pair(built_release, tmp_path_factory.mktemp("composed-pair"))
    before = fingerprint(pair.build_dir)
    yield pair
    assert fingerprint(pair.build_dir) == before, \
        f"a test changed the shared composed pair {pair.build_dir}"
