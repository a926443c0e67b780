"""ci/mutation.py's score: only mutants with a result count, and an interrupted run is no score."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.support.scripts import load_ci_script

SCRIPT = Path(__file__).resolve().parents[2] / "ci" / "mutation.py"


@pytest.fixture(scope="module")
def mutation() -> ModuleType:
    return load_ci_script("mutation")


def test_the_score_counts_failures_and_timeouts_as_killed(mutation: ModuleType) -> None:
    codes = {"m.a": 1, "m.b": -24, "m.c": 0, "m.d": 33, "m.e": 3}
    result = mutation.tally("builder/m.py", codes, 0)
    assert result == {"module": "builder/m.py", "mutants": 5, "killed": 3,
                      "survived": ["m.c"], "no_tests": ["m.d"], "score": 0.6}


def test_an_interrupted_run_is_refused_not_scored(mutation: ModuleType) -> None:
    codes = {"m.a": 1, "m.b": None, "m.c": None}
    with pytest.raises(SystemExit) as stopped:
        mutation.tally("builder/m.py", codes, -15)
    assert str(stopped.value) == ("mutmut left 2 of 3 mutants of builder/m.py without a known "
                                  "result (exit -15; first: m.b -> None): run it again")


def test_every_module_named_has_its_tests(mutation: ModuleType) -> None:
    root = SCRIPT.parents[1]
    for module, tests in mutation.MODULES.items():
        assert (root / module).is_file(), module
        files = [t.split("::")[0] for t in tests if t.startswith("tests/")]
        assert all((root / f).is_file() for f in files), module


def test_every_hand_mutant_changes_exactly_one_place(mutation: ModuleType) -> None:
    """A hand mutant whose line has moved on would mutate nothing (and count as killed)."""
    root = SCRIPT.parents[1]
    for group, (tests, mutants) in mutation.HAND_MUTANTS.items():
        assert all((root / t).is_file() for t in tests), group
        for file, original, mutant in mutants:
            assert (root / file).read_text().count(original) == 1, (group, original)
            assert original != mutant


def test_every_function_selected_for_mutation_exists(mutation: ModuleType) -> None:
    """A selected function that was renamed would drop its mutants from the score silently."""
    import ast

    root = SCRIPT.parents[1]
    for module, functions in mutation.MUTATED_FUNCTIONS.items():
        assert module in mutation.MODULES, module
        tree = ast.parse((root / module).read_text())
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert set(functions) <= defined, (module, set(functions) - defined)


def test_only_the_selected_functions_mutants_are_scored(mutation: ModuleType) -> None:
    patterns = mutation.selection("builder/compose/commit.py")
    assert "builder.compose.commit.x__publish__mutmut_*" in patterns
    codes = {"builder.compose.commit.x__publish__mutmut_1": 1,
             "builder.compose.commit.x__publish_commit__mutmut_2": 0,
             "builder.compose.commit.x_compose_image__mutmut_1": None,
             "builder.compose.commit.x__prepare_tree__mutmut_3": None}
    assert mutation.selected(codes, patterns) == {
        "builder.compose.commit.x__publish__mutmut_1": 1,
        "builder.compose.commit.x__publish_commit__mutmut_2": 0}
    assert mutation.selected(codes, []) == codes
    assert mutation.selection("builder/updater/index.py") == []
