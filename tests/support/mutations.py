"""Hypothesis strategies that vary a valid input document the way users and remote sides get
it wrong: a key dropped, a value of another type, unicode, huge numbers, a key that is a
number, path tricks where a name is expected, an unknown key. And the JSON Schema check the
shipped schemas are held to, with ECMA-262 patterns as editors and check-jsonschema use."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import regress
from hypothesis import strategies as st

from tests.support.cli import PROJECT_ROOT

SCHEMAS = PROJECT_ROOT / "schemas"

TRICKS = ("..", "../../etc/passwd", "/etc/passwd", "a/../../b", "", " ", "0", "true", "null",
          "é", "\u202e", "\x00", "x" * 300, "4.14.2-1", "~", "${HOME}", "*")
JUNK: st.SearchStrategy[Any] = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
    st.sampled_from(TRICKS), st.lists(st.integers(0, 9), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(0, 9), max_size=2))
KEYS: st.SearchStrategy[Any] = st.one_of(st.text(max_size=8), st.integers(0, 99),
                                         st.sampled_from(TRICKS), st.booleans())


def _paths(node: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [at]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*at, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*at, index))
    return found


def _node(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


@st.composite
def mutated(draw: st.DrawFn, original: Any, max_changes: int = 3) -> Any:
    """`original` with 1 to `max_changes` structured changes."""
    doc = copy.deepcopy(original)
    for _ in range(draw(st.integers(1, max_changes))):
        path = draw(st.sampled_from(_paths(doc)))
        operation = draw(st.sampled_from(("drop", "replace", "add", "renumber")))
        if not path:
            if operation == "replace":
                doc = draw(JUNK)
            continue
        parent, key = _node(doc, path[:-1]), path[-1]
        target = _node(doc, path)
        if operation == "drop":
            del parent[key]
        elif operation == "replace":
            parent[key] = draw(JUNK)
        elif operation == "add" and isinstance(target, dict):
            target[draw(KEYS)] = draw(JUNK)
        elif operation == "add" and isinstance(target, list):
            target.append(draw(st.one_of(JUNK, st.just(copy.deepcopy(target[0]))
                                         if target else JUNK)))
        elif operation == "renumber" and isinstance(parent, dict):
            parent[draw(st.integers(0, 99))] = parent.pop(key)
    return doc


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    """The `pattern` keyword with ECMA-262 semantics (Python's `$` also matches before a final
    newline; ECMA's and the tool's do not)."""
    if isinstance(instance, str) and regress.Regex(pattern).find(instance) is None:
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator,
                                          {"pattern": _pattern})


def schema_validator(name: str) -> Any:
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    return _Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def check_schema_agrees(model: Any, schema: Any, doc: Any) -> None:
    """The shipped schema refuses what the model refuses and accepts what it accepts. Rules
    beyond a JSON Schema (across fields, files on disk, network arithmetic) are `refused` by
    the model's own validators; every other rule must be in the schema."""
    from pydantic import ValidationError

    if json_and_yaml_differ(doc):
        return
    try:
        model.model_validate(doc)
    except ValidationError as exc:
        if any(e["type"] != "refused" for e in exc.errors()):
            assert not schema.is_valid(doc), exc.errors()[0]
        return
    assert schema.is_valid(doc), next(schema.iter_errors(doc))


def without_nulls(doc: Any) -> Any:
    """What the tool reads: `key:` with no value is an absent key in these files."""
    if isinstance(doc, dict):
        return {k: without_nulls(v) for k, v in doc.items() if v is not None}
    if isinstance(doc, list):
        return [without_nulls(v) for v in doc]
    return doc


def json_and_yaml_differ(doc: Any) -> bool:
    """A float with no fraction (YAML `1.0`) is an integer to JSON Schema, a float to YAML;
    a mapping key that is not a string has no JSON form."""
    if isinstance(doc, float):
        return doc.is_integer()
    if isinstance(doc, dict):
        return any(not isinstance(k, str) or json_and_yaml_differ(v) for k, v in doc.items())
    if isinstance(doc, list):
        return any(json_and_yaml_differ(v) for v in doc)
    return False


def sample(path: Path) -> Any:
    import yaml

    return yaml.safe_load(path.read_text())
