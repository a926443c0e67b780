"""Declarative input models (pydantic v2) and the one place their errors become InputErrors.

Each input file the builder reads has one model: it validates the document and generates the
JSON Schema shipped in `schemas/` for editors and other tools. A validation failure is one
line naming the file, the field path (`components.core.images.pause.ref`) and what is
allowed, as the hand-written readers said before; the "allowed" text of a field comes from
its schema (`description`, `enum`, bounds), so the message and the schema cannot disagree.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import ErrorDetails, PydanticCustomError

from builder.core.errors import InputError
from builder.core.schema import key_text

__all__ = ["Model", "input_error", "key_text", "refuse", "validate"]

M = TypeVar("M", bound=BaseModel)

_TYPE_NAMES = {"string_type": "a string", "int_type": "an integer", "bool_type": "true or false",
               "list_type": "a list", "dict_type": "a mapping", "model_type": "a mapping",
               "model_attributes_type": "a mapping", "float_type": "a number",
               "int_from_float": "an integer", "tuple_type": "a list"}


def _null_is_absent(schema: dict[str, Any]) -> None:
    """In the schema too, `key:` with no value is allowed where the key may be absent."""
    required = set(schema.get("required", ()))
    for name, prop in schema.get("properties", {}).items():
        if name in required or prop.get("type") == "null" or any(
                branch.get("type") == "null" for branch in prop.get("anyOf", ())):
            continue
        keep = {k: prop.pop(k) for k in ("default", "description", "title") if k in prop}
        schema["properties"][name] = {"anyOf": [prop, {"type": "null"}], **keep}


class Model(BaseModel):
    """Strict: no key nobody reads, no type coerced (`version: 4.14` is not "4.14")."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True,
                              populate_by_name=False, hide_input_in_errors=False,
                              json_schema_extra=_null_is_absent)

    @model_validator(mode="before")
    @classmethod
    def _absent_when_empty(cls, data: Any) -> Any:
        """`key:` with no value is YAML's null; in these files it means the key is absent
        (a required key given empty is "required", not "expected a string, got None")."""
        if isinstance(data, dict):
            known = {field.alias or name for name, field in cls.model_fields.items()}
            return {k: v for k, v in data.items() if v is not None or k not in known}
        return data


def refuse(message: str, at: str = "") -> PydanticCustomError:
    """The error a validator raises: `message` is the whole text after the field path, `at`
    the path of the field below the validated value that it is about (e.g. `files[0].mode`)."""
    return PydanticCustomError("refused", "{message}", {"message": message, "at": at})


def validate(model: type[M], data: Any, file: str, prefix: str = "") -> M:
    """`model` from `data` (a parsed YAML document, or the part of one at `prefix`) or the
    first problem as an InputError."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise input_error(model, exc.errors(include_url=False), file, prefix) from None


def input_error(model: type[BaseModel], errors: list[ErrorDetails], file: str,
                prefix: str = "") -> InputError:
    error = errors[0]
    loc = list(error["loc"])
    schema = model.model_json_schema(by_alias=True)
    if loc and loc[-1] == "[key]":
        loc.pop()
        key = loc.pop()
        path = _join(prefix, _join(_path(loc), key_text(key)))
        if not isinstance(key, str):
            return InputError(file, path, f"the name {key!r} is not a string; allowed: a "
                              f'string (quote it: "{key}")')
        parent = _schema_at(schema, schema, loc)
        if error["type"] == "string_pattern_mismatch":
            return InputError(file, path, f"the name {key!r} is not allowed; allowed: "
                              f"{_allowed_text(schema, parent)}")
        allowed = _allowed_keys(schema, parent)
        return InputError(file, path, f"unknown name {key!r}; allowed: {allowed or 'a string'}")
    if error["type"] == "invalid_key":  # a key of a mapping that is not a string (`7:`)
        key = loc.pop()
        allowed = _allowed_keys(schema, _schema_at(schema, schema, loc)) or "none"
        return InputError(file, _join(prefix, _join(_path(loc), key_text(key))),
                          f"unknown key {key!r}; allowed keys here: {allowed}")
    path = _path(loc)
    if error["type"] == "refused":
        path = _join(path, str((error.get("ctx") or {}).get("at", "")))
    return InputError(file, _join(prefix, path) or "(top level)",
                      _problem(schema, error, loc))


def _join(path: str, more: str) -> str:
    if not path or not more:
        return path or more
    return path + more if more.startswith("[") else f"{path}.{more}"


def _problem(schema: dict[str, Any], error: ErrorDetails, loc: list[Any]) -> str:
    kind, value = error["type"], error.get("input")
    if kind == "refused":
        return str((error.get("ctx") or {})["message"])
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        parent = _schema_at(schema, schema, loc[:-1])
        return f"unknown key; allowed keys here: {_allowed_keys(schema, parent) or 'none'}"
    if kind in _TYPE_NAMES:
        return f"expected {_TYPE_NAMES[kind]}, got {_show(value)}"
    allowed = _allowed_text(schema, _schema_at(schema, schema, loc))
    if kind == "too_short" and isinstance(value, list | dict | str) and not value:
        return f"is empty; allowed: {allowed}"
    return f"{_show(value)} is not allowed; allowed: {allowed}"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _path(loc: list[Any]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) and path else \
            (f".{key_text(part)}" if path else key_text(part))
    return path


def _resolve(root: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = root["$defs"][node["$ref"].rsplit("/", 1)[1]]
    if "anyOf" in node:  # an optional field: the branch that is not null
        branches = [b for b in node["anyOf"] if b.get("type") != "null"]
        if len(branches) == 1:
            return {**{k: v for k, v in node.items() if k != "anyOf"},
                    **_resolve(root, branches[0])}
    return node


def _schema_at(root: dict[str, Any], node: dict[str, Any], loc: list[Any]) -> dict[str, Any]:
    """The schema of the value at `loc` ({} when the path leaves the schema)."""
    node = _resolve(root, node)
    for part in loc:
        if isinstance(part, int) and "items" in node:
            node = _resolve(root, node["items"])
        elif isinstance(part, str) and part in node.get("properties", {}):
            described = node["properties"][part]
            node = {**_resolve(root, described),
                    **({"description": described["description"]}
                       if "description" in described else {})}
        elif isinstance(node.get("additionalProperties"), dict):
            node = _resolve(root, node["additionalProperties"])
        elif node.get("patternProperties"):  # a mapping with constrained names
            node = _resolve(root, next(iter(node["patternProperties"].values())))
        else:
            return {}
    return node


def _allowed_keys(root: dict[str, Any], node: dict[str, Any]) -> str:
    node = _resolve(root, node)
    if "properties" in node:
        return ", ".join(sorted(node["properties"]))
    names = node.get("propertyNames", {})
    if "enum" in names:
        return ", ".join(str(n) for n in names["enum"])
    return ""


def _allowed_text(root: dict[str, Any], node: dict[str, Any]) -> str:
    node = _resolve(root, node)
    if "enum" in node:
        return ", ".join(str(v) for v in node["enum"])
    if "description" in node:
        return str(node["description"]).split("\n", 1)[0].rstrip(".")
    if "const" in node:
        return json.dumps(node["const"])
    low, high = node.get("minimum"), node.get("maximum")
    if low is not None or high is not None:
        return f"an integer from {low} to {high}"
    if "pattern" in node:
        return f"a string matching {node['pattern']}"
    return "see the schema"
