"""A mistyped key, in any mapping of any input file, is one line naming the key as written and
the key it most likely meant, with every key allowed there, also where the key meant is a
required one (`verison:` is not "version: is required"). The mappings are found by walking
the models, so a key or a model added later is covered too; the device-side readers of
config.yaml, update.yaml, ovn.yaml and lvmd.yaml suggest the same key."""

from __future__ import annotations

import copy
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from builder.blueprint.profiles import ProfilesDocument
from builder.components.config import parse_config
from builder.components.schemas import LvmdDocument, MicroShiftConfigDocument, OvnDocument
from builder.core.errors import InputError
from builder.core.models import validate
from builder.core.zipapp import build_zipapp
from builder.release.document import ReleaseDocument
from builder.updater.update_config import parse_update_config
from builder.updater.update_model import UpdateDocument
from tests.components.test_schemas import OVNK, TOPOLVM
from tests.support.cli import PROJECT_ROOT, RELEASE

SOURCES = PROJECT_ROOT / "specs/sources"
# Each input file's model and its shipped sample (None: all comments, every default).
FILES: dict[str, tuple[type[BaseModel], Path]] = {
    "release.yaml": (ReleaseDocument, RELEASE),
    "profiles.yaml": (ProfilesDocument, PROJECT_ROOT / "blueprints/profiles.yaml"),
    "config.yaml": (MicroShiftConfigDocument,
                    SOURCES / "microshift-core/etc/microshift/config.yaml"),
    "ovn.yaml": (OvnDocument, SOURCES / "microshift-networking-ovnk/etc/microshift/ovn.yaml"),
    "lvmd.yaml": (LvmdDocument, SOURCES / "microshift-storage-topolvm/etc/microshift/lvmd.yaml"),
    "update.yaml": (UpdateDocument, SOURCES / "microshift-update/etc/microshift/update.yaml"),
}
Path_ = tuple[Any, ...]


def misspelled(key: str) -> str:
    """`key` with two letters swapped (`source` -> `suorce`), or one dropped when that
    changes nothing."""
    swapped = key[0] + key[2] + key[1] + key[3:] if len(key) > 2 else key[::-1]
    return swapped if swapped.lower() != key.lower() else key[:-1]


def _forms(annotation: Any) -> Iterator[tuple[tuple[str, ...], Any, type[BaseModel]]]:
    """The models a field may hold: (containers on the way, a dict's key type, model)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        yield from _forms(args[0])
    elif origin in (typing.Union, types.UnionType):
        for arg in args:
            yield from _forms(arg)
    elif origin is list:
        yield from ((("list", *way), key, model) for way, key, model in _forms(args[0]))
    elif origin is dict:
        yield from ((("dict", *way), args[0], model) for way, _, model in _forms(args[1]))
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield (), None, annotation


def _keys(model: type[BaseModel]) -> list[str]:
    return sorted(field.alias or name for name, field in model.model_fields.items())


def _literal_names(key_type: Any) -> tuple[str, ...]:
    return typing.get_args(key_type) if typing.get_origin(key_type) is typing.Literal else ()


def mappings(model: type[BaseModel], doc: dict[str, Any],
             at: Path_ = ()) -> Iterator[tuple[Path_, type[BaseModel] | tuple[str, ...]]]:
    """Every mapping a document of `model` may hold, as (path, its model), and every mapping
    whose names are a fixed set, as (path, the names). `doc` is filled in where the sample
    lacks a mapping (an empty one is created), so that every model is reached."""
    yield at, model
    for name, field in model.model_fields.items():
        for way, key_type, inner in _forms(field.annotation):
            holder: Any = doc
            slot: Any = field.alias or name
            path = (*at, slot)
            for step in way:
                box = _ensure(holder, slot, [] if step == "list" else {})
                names = _literal_names(key_type)
                if step == "dict" and names:
                    yield path, names
                slot = _slot(box, names)
                holder, path = box, (*path, slot)
            yield from mappings(inner, _ensure(holder, slot, {}), path)


def _ensure(holder: Any, slot: Any, empty: Any) -> Any:
    """holder[slot], replaced by `empty` unless it is a list or mapping as `empty` is."""
    if isinstance(holder, list):
        if slot == len(holder):
            holder.append(empty)
    elif not isinstance(holder.get(slot), type(empty)):
        holder[slot] = empty
    return holder[slot]


def _slot(box: Any, names: tuple[str, ...]) -> Any:
    """Where a mapping is in a list or a mapping of them: the first there is, else a new one."""
    if isinstance(box, list):
        return next((i for i, v in enumerate(box) if isinstance(v, dict)), len(box))
    return next((k for k, v in box.items() if isinstance(v, dict)),
                next((k for k, v in box.items() if v is None), (names or ("example",))[0]))


def _node(doc: Any, path: Path_) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def _materialized(doc: Any, path: Path_) -> Any:
    """A copy of `doc` in which `path` leads to a mapping (created empty where missing)."""
    doc = node = copy.deepcopy(doc)
    for index, part in enumerate(path):
        last = index + 1 == len(path)
        node = _ensure(node, part, [] if not last and isinstance(path[index + 1], int) else {})
    return doc


def _field(path: Path_) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text


def _cases() -> Iterator[tuple[str, Path_, type[BaseModel] | tuple[str, ...], str]]:
    for file, (model, sample) in FILES.items():
        scratch = yaml.safe_load(sample.read_text()) or {}
        for path, what in mappings(model, scratch):
            for key in what if isinstance(what, tuple) else _keys(what):
                yield file, path, what, key


CASES = list(_cases())


def _typo_document(file: str, path: Path_, key: str) -> tuple[Any, str]:
    """The sample of `file` with `key` at `path` mistyped (renamed, or added when absent)."""
    doc = _materialized(yaml.safe_load(FILES[file][1].read_text()) or {}, path)
    node, typo = _node(doc, path), misspelled(key)
    node[typo] = node.pop(key) if key in node else "x"
    return doc, typo


def test_every_model_of_every_input_file_is_reached() -> None:
    """Else a mapping would go untested: every model reachable from each file's model."""
    def reachable(model: type[BaseModel]) -> set[type[BaseModel]]:
        found = {model}
        for field in model.model_fields.values():
            for _, _, inner in _forms(field.annotation):
                found |= reachable(inner)
        return found

    for file, (model, _) in FILES.items():
        reached = {what for case_file, _, what, _ in CASES if case_file == file}
        assert reachable(model) <= reached, file


@pytest.mark.parametrize(("file", "path", "what", "key"), CASES,
                         ids=[f"{c[0]}:{_field((*c[1], c[3]))}" for c in CASES])
def test_a_mistyped_key_names_the_typo_and_the_key_meant(
        file: str, path: Path_, what: type[BaseModel] | tuple[str, ...], key: str) -> None:
    doc, typo = _typo_document(file, path, key)
    with pytest.raises(InputError) as info:
        validate(FILES[file][0], doc, file)
    assert info.value.field == _field((*path, typo)), str(info.value)
    if isinstance(what, tuple):  # a name from a fixed set (components.NAME)
        assert info.value.problem == (f"unknown name {typo!r}; did you mean `{key}`? "
                                      f"allowed: {', '.join(what)}")
    else:
        assert info.value.problem == (f"unknown key; did you mean `{key}`? allowed keys "
                                      f"here: {', '.join(_keys(what))}")


DEVICE_CASES = [case for case in CASES if case[0] in ("config.yaml", "update.yaml")]
PLUGIN_CASES = [case for case in CASES if case[0] in ("ovn.yaml", "lvmd.yaml")]


@pytest.mark.parametrize(("file", "path", "what", "key"), DEVICE_CASES,
                         ids=[f"{c[0]}:{_field((*c[1], c[3]))}" for c in DEVICE_CASES])
def test_the_device_readers_of_config_and_update_yaml_say_the_same(
        file: str, path: Path_, what: type[BaseModel], key: str) -> None:
    """microshift-components and microshift-update read these files on the device (Python
    3.9, no pydantic): the same line as the builder's."""
    doc, _ = _typo_document(file, path, key)
    with pytest.raises(InputError) as model:
        validate(FILES[file][0], doc, file)
    reader = parse_config if file == "config.yaml" else parse_update_config
    with pytest.raises(InputError) as device:
        reader(doc, file)
    assert str(device.value) == str(model.value)


@pytest.mark.parametrize(("file", "path", "what", "key"), PLUGIN_CASES,
                         ids=[f"{c[0]}:{_field((*c[1], c[3]))}" for c in PLUGIN_CASES])
def test_the_ovn_and_lvmd_plugins_suggest_the_same_key(
        tmp_path: Path, file: str, path: Path_, what: type[BaseModel], key: str) -> None:
    doc, typo = _typo_document(file, path, key)
    target = tmp_path / "etc/microshift" / file
    target.parent.mkdir(parents=True)
    target.write_text(yaml.safe_dump(doc))
    plugin = OVNK if file == "ovn.yaml" else TOPOLVM
    with pytest.raises(plugin.ConfigError) as info:
        OVNK.ovn_config(str(tmp_path)) if file == "ovn.yaml" else TOPOLVM.lvmd_config(target)
    head, allowed = str(info.value).split(" allowed: ")
    assert head == f"{target}: {_field((*path, typo))}: unknown field; did you mean `{key}`?"
    assert sorted(allowed.split(", ")) == _keys(what)


def test_a_mistyped_required_key_of_a_zip_application_spec_is_named(tmp_path: Path) -> None:
    """The device's zip applications are described by YAML specs read with the same
    reader (builder/core/schema.py) as update.yaml and config.yaml."""
    spec = tmp_path / "tool.zipapp.yaml"
    spec.write_text("interpreter: /usr/bin/python3\nmian: builder.cli:main\nmodules: []\n")
    with pytest.raises(InputError) as info:
        build_zipapp(spec)
    assert str(info.value) == f"{spec}: mian: unknown key; did you mean `main`?"
