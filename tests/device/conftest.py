"""The device tests' shared published pair and its images (built once per module that asks
for them)."""

from __future__ import annotations

import pytest

from builder.bootc.sample_images import SampleImages, build_sample_images
from builder.device.commits import UpdatePair, build_sample_pair, sample_version
from tests.device.test_scenarios import make_ctx
from tests.support import requires


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> UpdatePair:
    build = tmp_path_factory.mktemp("update-commits")
    return build_sample_pair(make_ctx(build), build / "server/repo", 256 * 1024)


@pytest.fixture(scope="module")
def images(pair: UpdatePair, tmp_path_factory: pytest.TempPathFactory) -> SampleImages:
    """v1 and v2 of `pair` as bootc images, their delta and the signed image index."""
    requires.need_tools("zstd")
    build = tmp_path_factory.mktemp("images")
    ctx = make_ctx(build)
    return build_sample_images(ctx, pair.repo, (pair.v1, pair.v2),
                               (sample_version(ctx, 1), sample_version(ctx, 2)), build / "out")
