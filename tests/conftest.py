"""Fixtures shared by the stages' tests: one build of the sample release's RPMs, and one
pair of composed releases. Integration fixtures run the real host tools."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

import tests.hypothesis_profiles  # noqa: F401  (registers and loads the profiles)
from builder.core.children import gpg_agents
from tests.support import requires
from tests.support.cli import build_release
from tests.support.ostree import ComposedPair, compose_pair

# The real-scale tier composes real releases for ~25-45 minutes: collected only in its own
# session (`nox -s realscale` sets MSEB_REALSCALE=1), never skipped test by test.
collect_ignore = [] if os.environ.get("MSEB_REALSCALE") == "1" else ["realscale"]


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


@pytest.fixture(scope="session")
def built_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One build of the sample release: DIR/rpms, DIR/repo, DIR/sample-base/{rpms,repo}."""
    return build_release(tmp_path_factory.mktemp("built-release"))


@pytest.fixture(scope="session")
def composed_pair(built_release: Path, tmp_path_factory: pytest.TempPathFactory) -> ComposedPair:
    """A copy of built_release where release 1, then release 2, were composed, deltas made.
    Tests must not change it; they copy it (tests/support/ostree.py) when they need to."""
    requires.need_root("compose runs rpm --root and keeps ownership")
    return compose_pair(built_release, tmp_path_factory.mktemp("composed-pair"))
