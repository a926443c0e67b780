"""docs/architecture.md says which steps are step directories and which record an identity
beside their output: the code must not drift from it."""

from __future__ import annotations

import re

from tests.support.cli import PROJECT_ROOT

DOC = (PROJECT_ROOT / "docs" / "architecture.md").read_text()
BUILDER = PROJECT_ROOT / "builder"


def _modules_matching(pattern: str) -> set[str]:
    found = set()
    for path in BUILDER.rglob("*.py"):
        if path.name != "steps.py" and re.search(pattern, path.read_text(), re.M):
            found.add(path.relative_to(BUILDER).as_posix())
    return found


def test_the_step_directory_users_are_the_ones_the_doc_lists() -> None:
    users = _modules_matching(r"\bStep\(")
    assert users == {"rpm/packages.py", "rpm/repos.py", "rpm/lint.py", "rpm/sample_base.py",
                     "rpm/sample_policy.py"}
    for module in users:
        assert f"`{module}`" in DOC, module


def test_the_recorded_identities_are_the_ones_the_doc_lists() -> None:
    identities = {(path, name) for path, name in [
        ("compose/commit.py", "compose_identity"), ("installer/iso.py", "iso_identity"),
        ("disk/image.py", "disk_identity")]}
    for module, function in identities:
        assert re.search(rf"^def {function}\(", (BUILDER / module).read_text(), re.M), function
        assert f"`{module}` `{function}`" in DOC
    assert _modules_matching(r"^def \w+_identity\(") == {m for m, _ in identities}


def test_the_import_rule_in_the_doc_is_the_contract_import_linter_checks() -> None:
    import tomllib

    layers = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"][
        "importlinter"]["contracts"][0]["layers"]
    shown = " ─► ".join(layer.replace("builder.", "") for layer in layers)
    assert shown in DOC


def test_the_release_stage_only_reads() -> None:
    """docs/architecture.md: the release stage writes nothing and runs no tool."""
    for path in (BUILDER / "release").rglob("*.py"):
        text = path.read_text()
        assert "Runner" not in text and "write_atomic" not in text, path


def test_every_module_the_doc_names_exists() -> None:
    named = set(re.findall(r"`((?:builder/)?[a-z_]+(?:/[a-z_]+)*\.py)`", DOC))
    missing = [name for name in sorted(named)
               if not (PROJECT_ROOT / name).is_file() and not (BUILDER / name).is_file()]
    assert named and missing == []
