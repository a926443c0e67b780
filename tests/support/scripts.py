"""The project's scripts under ci/ (not a package), imported for their tests."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.support.cli import PROJECT_ROOT


def load_ci_script(name: str) -> ModuleType:
    """ci/NAME.py as a module named ci_NAME."""
    spec = importlib.util.spec_from_file_location(f"ci_{name}", PROJECT_ROOT / "ci" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
