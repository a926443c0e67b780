"""Hypothesis profiles: `ci` (the default, bounded so `nox -s tests` stays in its time budget)
and `fuzz` (`nox -s fuzz`: MSEB_FUZZ_EXAMPLES examples per property, 10,000 by default).

`ci` is derandomized (the same examples every run, so CI is repeatable) and keeps no database;
`fuzz` keeps its database under build/ (git-ignored) so a failing example is replayed first on
the next run, and nothing is written into the source tree."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

_DB = DirectoryBasedExampleDatabase(os.path.join("build", "hypothesis"))
_SLOW_OK = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
            HealthCheck.data_too_large]

settings.register_profile("ci", max_examples=int(os.environ.get("MSEB_CI_EXAMPLES", "60")),
                          deadline=None, database=None, suppress_health_check=_SLOW_OK,
                          derandomize=True)
settings.register_profile("fuzz", max_examples=int(os.environ.get("MSEB_FUZZ_EXAMPLES", "10000")),
                          deadline=None, database=_DB, suppress_health_check=_SLOW_OK)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
