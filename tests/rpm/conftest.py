"""Fixtures for the RPM stage's tests."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def rpm_root(tmp_path: Path) -> Iterator[Path]:
    """An empty scratch root for `rpm --root`."""
    root = tmp_path / "root"
    root.mkdir()
    yield root
    shutil.rmtree(root, ignore_errors=True)
