"""A bootc image of the composed pair's first commit, built once per module that asks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli
from tests.support.ostree import IMAGE, ComposedPair, copy_build, ostree

ARCH = "x86_64"


def bootc_build(pair: ComposedPair, build: Path, commit: str, release: Path,
                *args: str) -> dict[str, Any]:
    """The bootc image of `commit` (the ref moved there), through the command line."""
    ostree(f"--repo={build / 'ostree/repo'}", "refs", "--create", pair.ref, "--force", commit)
    assert run_cli("--release", release, "bootc", "--build-dir", build, "--image", IMAGE,
                   *args) == 0
    report: dict[str, Any] = json.loads((build / f"bootc/{IMAGE}.{ARCH}.json").read_text())
    return report


@pytest.fixture(scope="module")
def first(composed_pair: ComposedPair, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[Path, dict[str, Any]]:
    build = copy_build(composed_pair.build_dir, tmp_path_factory.mktemp("bootc") / "build")
    return build, bootc_build(composed_pair, build, composed_pair.commit1,
                              composed_pair.release1)


