"""Fixtures shared by the stages' tests: one build of the sample release's RPMs, and one
pair of composed releases. Integration fixtures run the real host tools."""

from __future__ import annotations

from pathlib import Path

import pytest

import tests.hypothesis_profiles  # noqa: F401  (registers and loads the profiles)
from tests.support.cli import build_release
from tests.support.ostree import ComposedPair, compose_pair


@pytest.fixture(scope="session")
def built_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One build of the sample release: DIR/rpms, DIR/repo, DIR/sample-base/{rpms,repo}."""
    return build_release(tmp_path_factory.mktemp("built-release"))


@pytest.fixture(scope="session")
def composed_pair(built_release: Path, tmp_path_factory: pytest.TempPathFactory) -> ComposedPair:
    """A copy of built_release where release 1, then release 2, were composed, deltas made.
    Tests must not change it; they copy it (tests/support/ostree.py) when they need to."""
    return compose_pair(built_release, tmp_path_factory.mktemp("composed-pair"))
