"""A small reader for YAML mappings that names the file and the field in every error."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from builder.core.errors import InputError

T = TypeVar("T")

_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false", list: "a list",
               dict: "a mapping"}


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping (YAML says keys are unique;
    PyYAML would silently keep the last one, e.g. the second `version:`)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise InputError(str(path), "", "file not found") from exc
    except UnicodeDecodeError as exc:
        raise InputError(str(path), "", f"not UTF-8 text (byte {exc.start})") from exc
    except OSError as exc:
        raise InputError(str(path), "", f"cannot read: {exc.strerror}") from exc
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no arbitrary objects
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "syntax"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(str(path), where, f"not valid YAML: {problem}") from exc


_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.{}-]*$")  # no "/", no leading "."


def key_text(key: Any) -> str:
    """A mapping key as part of a field path: as it is when plain, else quoted (an empty key,
    or one with a newline or a space, must not break the one-line message)."""
    text = str(key)
    return text if _PLAIN_KEY.match(text) else json.dumps(text)


def closest(key: Any, allowed: Iterable[str]) -> str | None:
    """The allowed key a mistyped `key` most likely meant (case, '-' and '_' aside), or None."""
    def fold(text: str) -> str:
        return text.lower().replace("-", "").replace("_", "")
    folded = {fold(name): name for name in allowed}
    match = difflib.get_close_matches(fold(str(key)), list(folded), n=1, cutoff=0.6)
    return folded[match[0]] if match else None


def unknown_key(key: Any, allowed: Iterable[str]) -> str:
    """The problem text of an unknown key in a mapping whose keys are `allowed`."""
    names = list(allowed)
    guess = closest(key, names)
    meant = f" did you mean `{guess}`?" if guess is not None else ""
    return f"unknown key;{meant} allowed keys here: {', '.join(names) or 'none'}"


class Fields:
    """Reads one mapping; `close()` rejects keys nobody asked for."""

    def __init__(self, file: str, prefix: str, data: Any) -> None:
        self.file = file
        self.prefix = prefix
        if not isinstance(data, dict):
            raise InputError(file, prefix or "(top level)",
                             f"expected a mapping, got {type(data).__name__}")
        self.data: dict[str, Any] = data
        self._seen: set[str] = set()

    def path(self, key: str) -> str:
        return f"{self.prefix}.{key_text(key)}" if self.prefix else key_text(key)

    def error(self, key: str, problem: str, hint: str | None = None) -> InputError:
        return InputError(self.file, self.path(key), problem, hint)

    def has(self, key: str) -> bool:
        return key in self.data

    def get(self, key: str, kind: type[T], default: T | None = None, *,
            required: bool = False) -> T:
        self._seen.add(key)
        if key not in self.data or self.data[key] is None:
            if required:
                raise self._missing(key)
            return default  # type: ignore[return-value]
        value = self.data[key]
        # bool is an int in Python; keep them apart so `version: true` is rejected.
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.error(key, f"expected {_type_name(kind)}, got {value!r}"[:200])
        return value

    def check(self, key: str, value: T, ok: Callable[[T], object], allowed: str) -> T:
        if not ok(value):
            raise self.error(key, f"{value!r} is not allowed; allowed: {allowed}")
        return value

    def child(self, key: str, *, required: bool = False) -> Fields | None:
        self._seen.add(key)
        if key not in self.data or self.data[key] is None:
            if required:
                raise self._missing(key)
            return None
        return Fields(self.file, self.path(key), self.data[key])

    def _missing(self, key: str) -> InputError:
        """A required key that is absent; when it is a typo of a key given, that key."""
        for given in sorted((k for k in self.data if k not in self._seen), key=str):
            if closest(given, [key]) == key:
                return self.error(str(given), f"unknown key; did you mean `{key}`?")
        return self.error(key, "is required")

    def close(self) -> None:
        # Keys may be of any YAML type (`7:`, `true:`): compare them as text.
        unknown = sorted((k for k in self.data if k not in self._seen), key=str)
        if unknown:
            raise self.error(str(unknown[0]), unknown_key(unknown[0], sorted(self._seen)))


def _type_name(kind: Any) -> str:
    """`str`, `int | str` or a tuple of types, as the words of an error message."""
    kinds = getattr(kind, "__args__", None) or (kind if isinstance(kind, tuple) else (kind,))
    return " or ".join(_TYPE_NAMES.get(k, getattr(k, "__name__", str(k))) for k in kinds)
