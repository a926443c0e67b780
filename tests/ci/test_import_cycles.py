"""The lint's cycle check sees imports inside functions (where import-linter does not), and
the builder package has none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.cli import PROJECT_ROOT

CHECK = PROJECT_ROOT / "ci" / "import_cycles.py"


def check(package: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHECK), str(package)], capture_output=True,
                          text=True, check=False)


def test_a_cycle_through_an_import_inside_a_function_fails(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "a.py").write_text("def f():\n    from pkg.sub.b import g\n    return g\n")
    (package / "sub" / "b.py").write_text("from . import a\n\n\ndef g():\n    return a\n")
    (package / "c.py").write_text("from pkg.sub import a\n")  # imports, but no cycle
    proc = check(package)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "import cycle (counting imports inside functions): pkg.sub.a <-> pkg.sub.b"]


def test_the_builder_package_has_no_import_cycle() -> None:
    proc = check(PROJECT_ROOT / "builder")
    assert proc.returncode == 0, proc.stdout
