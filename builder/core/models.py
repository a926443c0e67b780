"""Declarative input models (pydantic v2) and the one place their errors become InputErrors.

Each input file the builder reads has one model: it validates the document and generates the
JSON Schema shipped in `schemas/` for editors and other tools. A validation failure is one
line naming the file, the field path (`components.core.images.pause.ref`) and what is
allowed, as the hand-written readers said before; the "allowed" text of a field comes from
its schema (`description`, `enum`, bounds), so the message and the schema cannot disagree.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import ErrorDetails, PydanticCustomError

from builder.core.errors import InputError
from builder.core.schema import closest, key_text, unknown_key

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
    schema = model.model_json_schema(by_alias=True)
    error, nodes = _first(_untagged(schema, errors))
    loc = list(error["loc"])
    if loc and loc[-1] == "[key]":
        loc.pop()
        key = loc.pop()
        path = _join(prefix, _join(_path(loc), key_text(key)))
        if not isinstance(key, str):
            return InputError(file, path, f"the name {key!r} is not a string; allowed: a "
                              f'string (quote it: "{key}")')
        parent = nodes[len(loc)]
        if error["type"] == "string_pattern_mismatch":
            return InputError(file, path, f"the name {key!r} is not allowed; allowed: "
                              f"{_allowed_text(schema, parent)}")
        names = _allowed_keys(schema, parent)
        guess = closest(key, names)
        meant = f" did you mean `{guess}`?" if guess is not None else ""
        return InputError(file, path, f"unknown name {key!r};{meant} allowed: "
                          f"{', '.join(names) or 'a string'}")
    if error["type"] == "invalid_key":  # a key of a mapping that is not a string (`7:`)
        key = loc.pop()
        allowed = ", ".join(_allowed_keys(schema, nodes[len(loc)])) or "none"
        return InputError(file, _join(prefix, _join(_path(loc), key_text(key))),
                          f"unknown key {key!r}; allowed keys here: {allowed}")
    path = _path(loc)
    if error["type"] == "refused":
        path = _join(path, str((error.get("ctx") or {}).get("at", "")))
    return InputError(file, _join(prefix, path) or "(top level)",
                      _problem(schema, error, loc, nodes))


# What pydantic names a form of a union with in an error's location: a model's name, `str`,
# `constrained-str`, `function-after[_ip(), str]`, ... (never `[key]`, a mapping's key).
_TAG = re.compile(r"^[A-Za-z][\w-]*(\[.*\])?$")
# An error with its location as the user wrote it and the schema at each step of it.
_Located = tuple[ErrorDetails, list[dict[str, Any]]]


def _untagged(root: dict[str, Any], errors: list[ErrorDetails]) -> list[_Located]:
    """The errors with pydantic's union tags taken out of their locations
    (`packages[3].PinnedBase.name` is `packages[3].name`), less those that only say the value
    is not of one of the union's other forms (a mapping is not "expected a string")."""
    located: list[tuple[ErrorDetails, list[dict[str, Any]], bool]] = []
    for error in errors:
        loc, nodes, tagged = _walk(root, list(error["loc"]),
                                   key_last=error["type"] == "extra_forbidden")
        located.append(({**error, "loc": tuple(loc)}, nodes,
                        tagged and error["type"] in _TYPE_NAMES))
    other_form = [(error, nodes) for error, nodes, wrong_form in located if not wrong_form]

    def about_other_form(error: ErrorDetails) -> bool:
        size = len(error["loc"])
        return any(len(other["loc"]) >= size and other["loc"][:size] == error["loc"]
                   for other, _ in other_form)

    kept = [(error, nodes) for error, nodes, wrong_form in located
            if not wrong_form or not about_other_form(error)]
    return kept or [(error, nodes) for error, nodes, _ in located]


def _first(errors: list[_Located]) -> _Located:
    """The error to report: the first, except that a required key missing beside an unknown
    key of the same mapping is most likely that key mistyped (`verison:`), so the unknown key
    is named, with the suggestion, rather than "version: is required"."""
    first = errors[0]
    if first[0]["type"] != "missing":
        return first
    parent, wanted = first[0]["loc"][:-1], str(first[0]["loc"][-1])
    extras = [e for e in errors if e[0]["type"] == "extra_forbidden"
              and e[0]["loc"][:-1] == parent]
    typos = [e for e in extras if closest(e[0]["loc"][-1], [wanted]) == wanted]
    return (typos or extras or [first])[0]


def _join(path: str, more: str) -> str:
    if not path or not more:
        return path or more
    return path + more if more.startswith("[") else f"{path}.{more}"


def _problem(schema: dict[str, Any], error: ErrorDetails, loc: list[Any],
             nodes: list[dict[str, Any]]) -> str:
    kind, value = error["type"], error.get("input")
    if kind == "refused":
        return str((error.get("ctx") or {})["message"])
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return unknown_key(loc[-1], _allowed_keys(schema, nodes[-2]))
    if kind in _TYPE_NAMES:
        return f"expected {_TYPE_NAMES[kind]}, got {_show(value)}"
    allowed = _allowed_text(schema, nodes[-1])
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


def _mapping(root: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """`node` resolved; of a choice of forms (`name: REF` or `name: {ref: ..., source: ...}`),
    the one that is a mapping, where a key below it is looked up."""
    node = _resolve(root, node)
    for choice in node.get("anyOf", ()):
        branch = _resolve(root, choice)
        if any(k in branch for k in ("properties", "additionalProperties", "patternProperties",
                                     "propertyNames")):
            return branch
    return node


def _walk(root: dict[str, Any], loc: list[Any], *,
          key_last: bool) -> tuple[list[Any], list[dict[str, Any]], bool]:
    """`loc` without union tags, the schema at each of its prefixes ({} once the path leaves
    the schema), and whether a tag ended it. `key_last`: its last part is a key the user
    wrote (of an unknown key), never a tag."""
    node = _resolve(root, root)
    clean: list[Any] = []
    nodes = [node]
    tagged = False
    for index, part in enumerate(loc):
        branch = None
        if isinstance(part, str) and not (key_last and index == len(loc) - 1):
            branch = _tagged_branch(root, node, part)
        if branch is not None:  # pydantic names the form of a union it tried: not a key
            nodes[-1] = node = branch
            tagged = index == len(loc) - 1
            continue
        node = _child(root, node, part)
        clean.append(part)
        nodes.append(node)
    return clean, nodes, tagged


def _tagged_branch(root: dict[str, Any], node: dict[str, Any],
                   tag: str) -> dict[str, Any] | None:
    """The branch of a union schema that pydantic's `tag` names (a model's name, or `str`,
    `constrained-str`, `int`, ...), or None when `node` is no union or `tag` is a key."""
    branches = [b for b in node.get("anyOf", ()) if b.get("type") != "null"]
    if len(branches) < 2 or not _TAG.match(tag):
        return None
    resolved = [_resolve(root, b) for b in branches]
    if any(tag in b.get("properties", {}) for b in resolved):
        return None
    for raw, branch in zip(branches, resolved, strict=True):
        if raw.get("$ref", "").rsplit("/", 1)[-1] == tag:
            return branch
    scalars = [b for b in resolved if "properties" not in b]
    kind = "integer" if "int" in tag else "string" if "str" in tag else None
    return next((b for b in scalars if b.get("type") == kind), scalars[0] if scalars else None)


def _child(root: dict[str, Any], node: dict[str, Any], part: Any) -> dict[str, Any]:
    """The schema of the value at key or index `part` of a value whose schema is `node`."""
    if isinstance(part, str):
        node = _mapping(root, node)
    if isinstance(part, int) and "items" in node:
        return _resolve(root, node["items"])
    if isinstance(part, str) and part in node.get("properties", {}):
        described = node["properties"][part]
        return {**_resolve(root, described),
                **({"description": described["description"]}
                   if "description" in described else {})}
    if isinstance(node.get("additionalProperties"), dict):
        return _resolve(root, node["additionalProperties"])
    if node.get("patternProperties"):  # a mapping with constrained names
        return _resolve(root, next(iter(node["patternProperties"].values())))
    return {}


def _allowed_keys(root: dict[str, Any], node: dict[str, Any]) -> list[str]:
    node = _mapping(root, node)
    if "properties" in node:
        return sorted(node["properties"])
    names = node.get("propertyNames", {})
    if "enum" in names:
        return [str(n) for n in names["enum"]]
    return []


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
