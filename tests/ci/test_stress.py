"""ci/stress.py reads each run's outcome from pytest's last line."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.support.scripts import load_ci_script

SCRIPT = Path(__file__).resolve().parents[2] / "ci" / "stress.py"


@pytest.fixture(scope="module")
def stress() -> ModuleType:
    return load_ci_script("stress")


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
