"""Rendered blueprints as a service or a user hands them back: keys dropped, values of other
types, path tricks in file customizations, truncated TOML. The validator (the rules of
osbuild/blueprint that the project checks before composing) ends in the blueprint or in one
error whose every line names the file and the field; never a traceback."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
import tomli_w
from hypothesis import given
from hypothesis import strategies as st

from builder.blueprint.render import load_profile, render_blueprint
from builder.blueprint.validate import check_blueprint
from builder.core.errors import BuildError
from builder.release.model import load_release
from tests.support.cli import RELEASE
from tests.support.mutations import mutated, without_nulls

TEXT = render_blueprint(load_release(RELEASE), load_profile("microshift-full"))
SAMPLE = tomllib.loads(TEXT)
SOURCE = "microshift-full.toml"


def _check(text: str) -> None:
    try:
        data = check_blueprint(text, SOURCE)
    except BuildError as exc:
        lines = str(exc).splitlines()
        assert all(line.startswith(f"{SOURCE}: ") for line in lines), lines
        return
    # Accepted: what compose relies on is there and of its type.
    assert isinstance(data.get("name"), str) and data["name"]
    for entry in data.get("customizations", {}).get("files", []):
        assert entry["path"].startswith("/") and "/../" not in entry["path"] + "/"


def _dumpable(doc: Any) -> bool:
    try:
        tomli_w.dumps(doc)
    except (TypeError, ValueError, AttributeError):
        return False
    return True


@pytest.mark.fuzz
@given(doc=mutated(SAMPLE))
def test_every_variant_is_a_blueprint_or_errors_naming_file_and_field(doc: Any) -> None:
    doc = without_nulls(doc)  # TOML has no null: a null is a key left out
    if not isinstance(doc, dict) or not _dumpable(doc):
        return  # not a table at the top, or keys that are not strings: no TOML file
    _check(tomli_w.dumps(doc))


@pytest.mark.fuzz
@given(cut=st.integers(0, len(TEXT)), junk=st.text(max_size=8))
def test_truncated_or_garbled_text_is_one_error(cut: int, junk: str) -> None:
    _check(TEXT[:cut] + junk)


@pytest.mark.parametrize("path", ["etc/relative", "/etc/../../escape", "/etc/./x", "/",
                                  "/etc/microshift/", "//etc/x"])
def test_file_paths_that_leave_or_bend_the_tree_are_refused(path: str) -> None:
    doc = tomllib.loads(TEXT)
    doc["customizations"]["files"][0]["path"] = path
    with pytest.raises(BuildError, match=r"customizations\.files\[0\]"):
        check_blueprint(tomli_w.dumps(doc), SOURCE)


@pytest.fixture(scope="module")
def template_copy(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import shutil

    from builder.blueprint.render import BLUEPRINTS_DIR

    copy = tmp_path_factory.mktemp("templates") / "blueprints"
    shutil.copytree(BLUEPRINTS_DIR, copy)
    return copy


@pytest.mark.fuzz
@given(at=st.floats(0, 1), junk=st.one_of(st.text(max_size=12), st.sampled_from(
    ["{{", "{%", "{% if %}", "{{ nope.x }}", "{{ 1/0 }}", "{% include 'x' %}", "}}", "{#",
     "{{ release | toml_text }}", "{{ [] | toml }}", "{% extends 'none.j2' %}"])))
def test_an_edited_template_renders_or_is_one_error_naming_it(template_copy: Any, at: float,
                                                                junk: str) -> None:
    from builder.blueprint.render import BLUEPRINTS_DIR

    original = (BLUEPRINTS_DIR / "_microshift.toml.j2").read_text()
    cut = int(len(original) * at)
    (template_copy / "_microshift.toml.j2").write_text(original[:cut] + junk + original[cut:])
    profile = load_profile("microshift-full", template_copy)
    try:
        text = render_blueprint(load_release(RELEASE), profile)
    except BuildError as exc:
        assert ".j2" in str(exc).splitlines()[0] or "template" in str(exc), str(exc)
        return
    _check(text)
