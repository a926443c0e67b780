"""ci/stress.py reads each run's outcome from pytest's last line."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "ci" / "stress.py"


@pytest.fixture(scope="module")
def stress() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ci_stress", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("line, expected", [
    ("1015 passed in 502.18s (0:08:22)", {"passed": 1015, "failed": 0, "skipped": 0,
                                          "errors": 0}),
    ("3 failed, 1011 passed, 1 skipped, 2 errors in 501.20s",
     {"passed": 1011, "failed": 3, "skipped": 1, "errors": 2}),
    ("1 error in 0.5s", {"passed": 0, "failed": 0, "skipped": 0, "errors": 1}),
])
def test_a_runs_counts_come_from_pytests_summary(stress: ModuleType, line: str,
                                                  expected: dict[str, int]) -> None:
    assert stress.counts(line) == expected
