"""Shared fixtures. Integration fixtures run the real host tools (rpmbuild, createrepo_c)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from builder.cli import main

PROJECT_ROOT = Path(__file__).resolve().parent.parent
RELEASE = PROJECT_ROOT / "release.yaml"


def run_cli(*args: str | Path) -> int:
    return main([str(a) for a in args])


def build_release(build_dir: Path, release: Path = RELEASE) -> Path:
    """Build the sample base and the release's RPMs into build_dir, in-process."""
    assert run_cli("--release", release, "sample-base", "--build-dir", build_dir) == 0
    assert run_cli("--release", release, "rpms", "--build-dir", build_dir) == 0
    return build_dir


@pytest.fixture(scope="session")
def built_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One build of the sample release: DIR/rpms, DIR/repo, DIR/sample-base/{rpms,repo}."""
    return build_release(tmp_path_factory.mktemp("built-release"))


@pytest.fixture(scope="session")
def composed_pair(built_release: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A copy of built_release where release 1, then release 2, were composed, deltas made.
    Tests must not change it; they copy it (tests/ostree_helpers.py) when they need to."""
    from ostree_helpers import compose_pair

    return compose_pair(built_release, tmp_path_factory.mktemp("composed-pair"))


@pytest.fixture
def rpm_root(tmp_path: Path) -> Iterator[Path]:
    """An empty scratch root for `rpm --root`."""
    root = tmp_path / "root"
    root.mkdir()
    yield root
    shutil.rmtree(root, ignore_errors=True)


def rpm_query(*args: str | Path) -> str:
    proc = subprocess.run(["rpm", *map(str, args)], capture_output=True, text=True, check=True)
    return proc.stdout
