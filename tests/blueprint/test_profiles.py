"""profiles.yaml's model: every variant of the shipped profiles ends in profiles or one line
naming the file and the field, and the shipped JSON Schema agrees with the tool."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given

from builder.blueprint.profiles import ProfilesDocument
from builder.blueprint.render import BLUEPRINTS_DIR, load_profiles
from builder.core.errors import InputError
from tests.support.mutations import check_schema_agrees, mutated, sample, schema_validator

SAMPLE = sample(BLUEPRINTS_DIR / "profiles.yaml")
SCHEMA = schema_validator("profiles")
TOP_KEYS = set(ProfilesDocument.model_fields) | {"(top level)"}


@pytest.fixture(scope="module")
def blueprints() -> Path:
    """A copy of blueprints/ (its templates) whose profiles.yaml each example rewrites."""
    copy = Path(tempfile.mkdtemp(prefix="blueprints-")) / "blueprints"
    shutil.copytree(BLUEPRINTS_DIR, copy)
    return copy


@pytest.mark.fuzz
@given(doc=mutated(SAMPLE))
def test_every_variant_is_profiles_or_one_line_naming_file_and_field(
        blueprints: Path, doc: Any) -> None:
    path = blueprints / "profiles.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    try:
        profiles = load_profiles(blueprints)
    except InputError as exc:
        message = str(exc)
        assert "\n" not in message and message.startswith(f"{path}: ") and exc.field, message
        top = exc.field.split(".")[0].split("[")[0]
        assert top in TOP_KEYS or exc.problem.startswith("unknown key"), message
        return
    for profile in profiles.values():  # what the templates and the blueprint rely on
        assert "core" in profile.components and profile.description
        assert (blueprints / profile.template).is_file()


@pytest.mark.fuzz
@given(doc=mutated(SAMPLE))
def test_the_schema_rejects_what_the_model_rejects_and_accepts_what_it_accepts(
        doc: Any) -> None:
    check_schema_agrees(ProfilesDocument, SCHEMA, doc)


@pytest.mark.parametrize(("text", "field", "words"), [
    ("images: {a/b: {description: x, components: [core]}}", 'images."a/b"',
     "the name 'a/b' is not allowed; allowed: image names"),
    ("images: {x: {description: x, components: [core, core]}}", "images.x.components",
     "lists a component twice"),
    ("images: {x: {description: x, components: [multus]}}", "images.x.components",
     "must include core"),
    ("images: {x: {description: x, components: [core], settings: {ovn_mtu: 99999}}}",
     "images.x.settings.ovn_mtu", "allowed: an integer from 1280 to 65535"),
    ("images: {x: {description: x, components: [core], packages: [{name: a}]}}",
     "images.x.packages[0]", ""),
])
def test_bad_profiles_name_the_field(blueprints: Path, text: str, field: str,
                                     words: str) -> None:
    (blueprints / "profiles.yaml").write_text(text + "\n")
    with pytest.raises(InputError) as info:
        load_profiles(blueprints)
    assert info.value.field.startswith(field) and words in str(info.value), str(info.value)
