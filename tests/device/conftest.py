"""The device tests' shared published pair (built once per module that asks for it)."""

from __future__ import annotations

import pytest

from builder.device.commits import UpdatePair, build_sample_pair
from tests.device.test_scenarios import make_ctx


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> UpdatePair:
    build = tmp_path_factory.mktemp("update-commits")
    return build_sample_pair(make_ctx(build), build / "server/repo", 256 * 1024)
