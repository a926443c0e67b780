"""release.yaml's model: every variant of the sample release ends in a Release or in one
line naming the file and the field, and the shipped JSON Schema agrees with the tool."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from builder.cli import main
from builder.core.errors import InputError
from builder.release.document import ReleaseDocument
from builder.release.model import load_release
from tests.support.cli import RELEASE
from tests.support.mutations import (
    check_schema_agrees,
    mutated,
    sample,
    schema_validator,
)

SAMPLE = sample(RELEASE)
# The sample with a payload per architecture, each form once: variants of both are generated
# (and of an accepted rpmlint finding on a payload file).
PER_ARCH = {**SAMPLE, "architectures": ["x86_64", "aarch64"], "components": {
    **SAMPLE["components"], "core": {**SAMPLE["components"]["core"], "payload": {
        "x86_64": SAMPLE["components"]["core"]["payload"],
        "aarch64": {"sample": "microshift"}}}},
    "rpmlint": {"accept": [{"check": "statically-linked-binary", "path": "/usr/bin/microshift",
                            "why": "built static on purpose"}]}}
SEEDS = pytest.mark.parametrize("seed", [SAMPLE, PER_ARCH], ids=["single", "per-arch"])
SCHEMA = schema_validator("release")
TOP_KEYS = set(ReleaseDocument.model_fields) | {"(top level)"}


def _load(doc: Any) -> tuple[Path, InputError | None]:
    folder = Path(tempfile.mkdtemp(prefix="release-"))
    path = folder / "release.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    try:
        load_release(path)
    except InputError as exc:
        return path, exc
    return path, None


@pytest.mark.fuzz
@SEEDS
@given(data=st.data())
def test_every_variant_is_a_release_or_one_line_naming_file_and_field(
        seed: Any, data: st.DataObject) -> None:
    path, error = _load(data.draw(mutated(seed)))
    if error is not None:
        message = str(error)
        assert "\n" not in message and len(message) < 600, message
        assert message.startswith(f"{path}: ") and error.field, message
        top = error.field.split(".")[0].split("[")[0]
        assert top in TOP_KEYS or error.problem.startswith("unknown key"), message


@pytest.mark.fuzz
@SEEDS
@given(data=st.data())
def test_the_schema_rejects_what_the_model_rejects_and_accepts_what_it_accepts(
        seed: Any, data: st.DataObject) -> None:
    check_schema_agrees(ReleaseDocument, SCHEMA, data.draw(mutated(seed)))


def test_the_per_architecture_seed_is_a_release_the_schema_accepts() -> None:
    """Else its variants would only ever test refusals."""
    assert SCHEMA.is_valid(PER_ARCH)
    _, error = _load(PER_ARCH)
    assert error is None, str(error)


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda d: d.update(release=[1]), "release"),
    (lambda d: d.update(release={"a": 1}), "release"),
    (lambda d: d["components"]["multus"]["images"].update({7: {"ref": "x"}}),
     "components.multus.images.7"),
    (lambda d: d["components"]["multus"]["images"].update(
        {"../../escape": d["components"]["multus"]["images"]["multus-cni"]}),
     'components.multus.images."../../escape"'),
])
def test_the_issues_examples_are_one_line_not_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], mutate: Any, field: str) -> None:
    doc = yaml.safe_load(RELEASE.read_text())
    mutate(doc)
    path = tmp_path / "release.yaml"
    path.write_text(yaml.safe_dump(doc))
    build = tmp_path / "build"
    assert main(["--release", str(path), "blueprint", "--build-dir", str(build)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: {path}: {field}: "), err
    assert not any("Traceback" in line for line in err)
    assert not build.exists() or not any(build.iterdir())


def test_the_sample_release_validates_against_the_schema_with_check_jsonschema() -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "check_jsonschema", "--schemafile",
                           "schemas/release.schema.json", str(RELEASE)],
                          capture_output=True, text=True, check=False, cwd=RELEASE.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.fuzz
@given(content=st.binary(max_size=512), cut=st.integers(0, 512),
       pinned=st.sampled_from(["whole", "truncated", "none", "malformed"]))
def test_a_payload_file_is_taken_only_as_pinned(content: bytes, cut: int, pinned: str) -> None:
    """A payload file that is truncated (or not the file the release pinned) is refused naming
    the field; a missing pin is allowed for local files (the RPM records its digest)."""
    folder = Path(tempfile.mkdtemp(prefix="payload-"))
    (folder / "microshift").write_bytes(content[:cut])
    digest = {"whole": hashlib.sha256(content).hexdigest(), "none": None,
              "truncated": hashlib.sha256(content[:cut]).hexdigest(),
              "malformed": hashlib.sha256(content).hexdigest()[:63] + "G"}[pinned]
    doc = yaml.safe_load(RELEASE.read_text())
    doc["components"]["core"]["payload"] = {"path": "microshift",
                                            **({"sha256": digest} if digest else {})}
    (folder / "release.yaml").write_text(yaml.safe_dump(doc))
    try:
        release = load_release(folder / "release.yaml")
    except InputError as exc:
        assert exc.field == "components.core.payload.sha256", str(exc)
        assert pinned == "malformed" or content[:cut] != content, str(exc)
        return
    assert pinned in ("none", "truncated") or content[:cut] == content
    assert release.payload_for("x86_64")[0].source.location == str(folder / "microshift")
