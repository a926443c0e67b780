"""Why a test may skip, in one place.

A test skips only for what a CI machine can never meet: it does not run as root, the
kernel gives it no network namespaces or loop devices, it is another CPU architecture, the
distribution packages no Python 3.9, or a slower tier was asked for. A missing host tool is
not such a reason: `ci/install-host-tools.sh` installs every tool a test runs, and under
BUILDER_NO_TOOL_SKIPS=1 (`.ci/run` sets it) every other skip fails the test instead
(tests/conftest.py), so a skip on CI never hides a failure. docs/testing.md lists these.
"""

from __future__ import annotations

import os

import pytest

from builder.core.runner import find_tool

STRICT_ENV = "BUILDER_NO_TOOL_SKIPS"

# The reasons a skip may give; each starts with one of these.
NOT_ROOT = "needs root"
NO_NETNS = "no network namespaces here"
NO_LOOP = "no loop devices here"
OTHER_ARCH = "not an x86_64 machine"
NO_PYTHON39 = "no Python 3.9 interpreter here"
TIER = "another tier"
ALLOWED = (NOT_ROOT, NO_NETNS, NO_LOOP, OTHER_ARCH, NO_PYTHON39, TIER)


def strict() -> bool:
    return os.environ.get(STRICT_ENV) == "1"


def root_only(why: str) -> pytest.MarkDecorator:
    """The one gate for tests that need root (rpm --root with ownership, mount, losetup)."""
    return pytest.mark.skipif(os.geteuid() != 0, reason=f"{NOT_ROOT}: {why}")


def need_root(why: str) -> None:
    if os.geteuid() != 0:
        pytest.skip(f"{NOT_ROOT}: {why}")


def need_tools(*names: str) -> None:
    """Skip (fail under BUILDER_NO_TOOL_SKIPS=1) when a host tool is missing."""
    missing = [name for name in names if find_tool(name) is None]
    if missing:
        pytest.skip(f"missing tool: {', '.join(missing)} "
                    "(`bash ci/install-host-tools.sh` installs it)")


def allowed(reason: str) -> bool:
    return reason.startswith(ALLOWED)
