"""The zip applications devices run (microshift-components, microshift-update) are executed
by RHEL 9's Python 3.9. Every module they pack must parse as Python 3.9 and must not call
what 3.9 lacks at run time (annotations are strings here, so `X | Y` in them is fine)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from tests.support.cli import PROJECT_ROOT

SPECS = sorted(PROJECT_ROOT.glob("specs/sources/*/usr/bin/*.zipapp.yaml"))
NEWER_KEYWORDS = {("zip", "strict"), ("dataclass", "kw_only"), ("dataclass", "slots")}


def _modules() -> list[Path]:
    names = {m for spec in SPECS for m in yaml.safe_load(spec.read_text())["modules"]}
    return [PROJECT_ROOT / name for name in sorted(names)]


def test_the_device_zip_applications_are_found() -> None:
    assert {p.name for p in SPECS} == {"microshift-components.zipapp.yaml",
                                      "microshift-update.zipapp.yaml"}


@pytest.mark.parametrize("module", _modules(), ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_module_runs_on_python_3_9(module: Path) -> None:
    tree = ast.parse(module.read_text(), str(module), feature_version=(3, 9))
    annotated = any(isinstance(node, (ast.AnnAssign, ast.FunctionDef, ast.AsyncFunctionDef))
                    for node in ast.walk(tree))
    assert not annotated or any(isinstance(node, ast.ImportFrom) and node.module == "__future__"
               for node in tree.body), f"{module}: needs `from __future__ import annotations`"
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            for keyword in node.keywords:
                assert (node.func.id, keyword.arg) not in NEWER_KEYWORDS, \
                    f"{module}:{node.lineno}: {node.func.id}({keyword.arg}=) is Python 3.10+"
