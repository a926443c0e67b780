"""One bounded reader for every JSON document that comes from outside: what the device
fetches (the update index, its statement), what it keeps (its state files) and what the
collector is sent (verdicts, enrolment keys).

`json.loads` alone trusts its input: a document nested 200,000 levels deep ends in a
RecursionError, a 100,000-digit number costs seconds to convert, a key given twice keeps
its last value silently. `parse` refuses each of those with one line naming the document,
and `Doc` reads an object's fields by type, naming the field and what is allowed:

    index.json: to_version is an object; allowed: a string or null

Device side too: Python 3.9, standard library only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

MAX_DEPTH = 16
MAX_DIGITS = 30      # an integer literal longer than this is no count, size or time
STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
BRACKETS = re.compile(rb"[\[\]{}]")
T = TypeVar("T")
KINDS = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
         list: "a list", dict: "an object", type(None): "null"}


class BadDocument(ValueError):
    """A document that is not what its reader allows; the message is the one line to show."""

    def __init__(self, what: str, field: str, problem: str) -> None:
        super().__init__(f"{what}: {field} {problem}" if field else f"{what}: {problem}")
        self.what = what
        self.field = field
        self.problem = problem


def parse(data: bytes, what: str, *, limit: int, depth: int = MAX_DEPTH) -> Any:
    """The JSON value in `data`, at most `limit` bytes and `depth` levels of nesting."""
    if len(data) > limit:
        raise BadDocument(what, "", f"is {len(data)} bytes, over the limit of {limit}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadDocument(what, "", f"is not UTF-8 text (byte {exc.start})") from None
    deepest = nesting(data)
    if deepest > depth:
        raise BadDocument(what, "", f"is nested {deepest} levels deep; allowed: at most "
                                    f"{depth}")
    try:
        return json.loads(text, parse_constant=_no_constant, parse_int=_integer,
                          object_pairs_hook=_unique)
    except BadDocument:
        raise
    except (ValueError, RecursionError) as exc:
        raise BadDocument(what, "", f"is not JSON ({_reason(exc)})") from None


def nesting(data: bytes) -> int:
    """How deep arrays and objects nest in `data` (strings, where brackets are text, left
    out); linear in the size, with no recursion."""
    deepest = level = 0
    for match in BRACKETS.finditer(STRINGS.sub(b"", data)):
        if match.group() in (b"[", b"{"):
            level += 1
            deepest = max(deepest, level)
        else:
            level -= 1
    return deepest


def _reason(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"line {exc.lineno} column {exc.colno}: {exc.msg}"
    return str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits")
    return int(text)


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"key {key!r} given twice")
        result[key] = value
    return result


def kind(value: Any) -> str:
    """What a JSON value is, as the words of a message."""
    if isinstance(value, bool):
        return KINDS[bool]
    return KINDS.get(type(value), type(value).__name__)


class Doc:
    """Typed reads of one JSON object's fields; each failure names the field."""

    def __init__(self, data: Any, what: str, prefix: str = "") -> None:
        if not isinstance(data, dict):
            raise BadDocument(what, prefix, f"is {kind(data)}; allowed: an object")
        self.data: dict[str, Any] = data
        self.what = what
        self.prefix = prefix

    def name(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def fail(self, key: str, problem: str) -> BadDocument:
        return BadDocument(self.what, self.name(key), problem)

    def _typed(self, key: str, types: tuple[type, ...], allowed: str, *, required: bool,
               default: Any) -> Any:
        if key not in self.data or (self.data[key] is None and not required):
            if required:
                raise self.fail(key, f"is missing; allowed: {allowed}")
            return default
        value = self.data[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise self.fail(key, f"is {kind(value)}; allowed: {allowed}")
        return value

    def text(self, key: str, *, required: bool = True, default: str | None = None,
             pattern: re.Pattern[str] | None = None, allowed: str = "a string",
             max_length: int = 4096) -> Any:
        value = self._typed(key, (str,), allowed, required=required, default=default)
        if isinstance(value, str) and (len(value) > max_length or
                                       (pattern is not None and not pattern.match(value))):
            shown = value if len(value) <= 80 else value[:77] + "..."
            raise self.fail(key, f"is {shown!r}; allowed: {allowed}")
        return value

    def integer(self, key: str, low: int, high: int, *, required: bool = True,
                default: int | None = None) -> Any:
        allowed = f"an integer from {low} to {high}"
        value = self._typed(key, (int,), allowed, required=required, default=default)
        if isinstance(value, int) and not low <= value <= high:
            raise self.fail(key, f"is {value}; allowed: {allowed}")
        return value

    def number(self, key: str, low: float, high: float, *, required: bool = True,
               default: float | None = None) -> Any:
        allowed = f"a number from {low:g} to {high:g}"
        value = self._typed(key, (int, float), allowed, required=required, default=default)
        if isinstance(value, (int, float)) and not low <= value <= high:
            raise self.fail(key, f"is {value}; allowed: {allowed}")
        return None if value is None else float(value)

    def boolean(self, key: str, *, required: bool = True, default: bool | None = None) -> Any:
        return self._typed(key, (bool,), "true or false", required=required, default=default)

    def array(self, key: str, *, required: bool = True, max_items: int = 10_000) -> list[Any]:
        value = self._typed(key, (list,), "a list", required=required, default=[])
        if len(value) > max_items:
            raise self.fail(key, f"has {len(value)} items; allowed: at most {max_items}")
        return list(value)

    def child(self, key: str, *, required: bool = True) -> Doc | None:
        value = self._typed(key, (dict,), "an object", required=required, default=None)
        return None if value is None else Doc(value, self.what, self.name(key))

    def mapping(self, key: str, ok: Callable[[str], object], allowed: str
                ) -> dict[str, str]:
        """An object of strings to strings, each key and value `ok`."""
        value = self._typed(key, (dict,), allowed, required=False, default={})
        for name, item in value.items():
            if not isinstance(item, str) or not ok(name) or not ok(item):
                raise self.fail(f"{key}.{name}"[:80], f"is not allowed; allowed: {allowed}")
        return dict(value)

    def equals(self, key: str, expected: T, allowed: str) -> T:
        if key not in self.data:
            raise self.fail(key, f"is missing; allowed: {allowed}")
        if self.data.get(key) != expected:
            value = self.data.get(key)
            shown = repr(value)[:80] if isinstance(value, (str, int, float)) else kind(value)
            raise self.fail(key, f"is {shown}; allowed: {allowed}")
        return expected
