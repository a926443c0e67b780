"""The rollout tests' published pair of releases (v1, v2), built once per module."""

from __future__ import annotations

import pytest

from builder.device.commits import UpdatePair, build_sample_pair
from tests.device.test_scenarios import make_ctx


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> UpdatePair:
    build = tmp_path_factory.mktemp("fleet-commits")
    return build_sample_pair(make_ctx(build), build / "server/repo", 256 * 1024)
