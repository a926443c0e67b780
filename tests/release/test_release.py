"""release.yaml validation: every error names the file and field and writes nothing."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from builder import __version__
from builder.core.errors import InputError
from builder.release.model import load_release
from builder.sources.samples import sample_digest
from tests.support.cli import RELEASE, run_cli


def write_release(tmp_path: Path, mutate: object) -> Path:
    data = yaml.safe_load(RELEASE.read_text())
    mutate(data)  # type: ignore[operator]
    path = tmp_path / "release.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_sample_release_loads_with_every_component_and_pinned_image() -> None:
    release = load_release(RELEASE)
    assert release.evr == "4.14.2-1"
    keys = {c.key for c in release.components}
    assert {"core", "networking-ovnk", "networking-bridge", "storage-topolvm", "multus"} <= keys
    for image in release.images():
        assert image.ref.endswith(image.digest.removeprefix("sha256:"))
        assert image.source == "sample"


def test_sample_image_digests_in_release_match_the_generated_images() -> None:
    for image in load_release(RELEASE).images():
        assert image.digest == sample_digest(image.component, image.name), image.ref


@pytest.mark.parametrize(("mutate", "field", "words"), [
    (lambda d: d.update(version="4.14-2"), "version", "no '-'"),
    (lambda d: d.update(release="1-beta"), "release", "no '-'"),
    (lambda d: d["components"].update(frobnicator={}), "components.frobnicator",
     "unknown name 'frobnicator'; allowed: core, networking-ovnk"),
    (lambda d: d.update(colour="blue"), "colour", "unknown key"),
    (lambda d: d["components"]["core"].update(extra=1), "components.core.extra", "unknown key"),
    (lambda d: d["components"]["core"].update(payload={"path": "nope/microshift"}),
     "components.core.payload.path", "does not exist"),
    (lambda d: d["components"]["core"].update(payload={"url": "https://example.invalid/m"}),
     "components.core.payload.sha256", "is required with url"),
    (lambda d: d["components"]["core"].update(payload={"url": "https://x.invalid/m",
                                                       "sha256": "abc"}),
     "components.core.payload.sha256", "64 lowercase hex"),
    (lambda d: d["components"]["networking-ovnk"]["images"]["ovn-kubernetes"].update(
        ref="quay.io/microshift-sample/ovn-kubernetes:latest"),
     "components.networking-ovnk.images.ovn-kubernetes.ref", "not pinned by digest"),
    (lambda d: d.update(architectures=["sparc"]), "architectures[0]", "x86_64, aarch64"),
    (lambda d: d.update(source_date_epoch="yesterday"), "source_date_epoch", "an integer"),
    (lambda d: d["components"].pop("core"), "components.core", "is required"),
])
def test_bad_release_names_file_and_field(tmp_path: Path, mutate: object, field: str,
                                          words: str) -> None:
    path = write_release(tmp_path, mutate)
    with pytest.raises(InputError) as info:
        load_release(path)
    assert info.value.path == str(path)
    assert info.value.field == field
    assert words in str(info.value)


def test_payload_sha256_mismatch_is_reported(tmp_path: Path) -> None:
    payload = tmp_path / "microshift"
    payload.write_bytes(b"#!/bin/sh\necho real\n")
    wrong = hashlib.sha256(b"something else").hexdigest()
    path = write_release(tmp_path, lambda d: d["components"]["core"].update(
        payload={"path": str(payload), "sha256": wrong}))
    with pytest.raises(InputError, match=r"components.core.payload.sha256: mismatch"):
        load_release(path)


def test_cli_bad_input_is_one_line_exit_2_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_release(tmp_path, lambda d: d.update(version="4.14-2"))
    build_dir = tmp_path / "build"
    assert run_cli("--release", path, "rpms", "--build-dir", build_dir) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"error: {path}: version:")
    assert "Traceback" not in err[0]
    assert not build_dir.exists()


def _renamed(keys: tuple[str, ...], new: str) -> object:
    def mutate(data: dict[str, object]) -> None:
        node = data
        for key in keys[:-1]:
            node = node[key]  # type: ignore[assignment]
        node[new] = node.pop(keys[-1])
    return mutate


@pytest.mark.parametrize(("keys", "typo", "field"), [
    (("source_date_epoch",), "source_date_epcoh", "source_date_epcoh"),
    (("version",), "verison", "verison"),
    (("components", "core", "images", "pause", "ref"), "rf", "components.core.images.pause.rf"),
    (("components", "core", "images", "pause", "source"), "sorce",
     "components.core.images.pause.sorce"),
])
def test_a_mistyped_key_is_named_with_the_key_meant(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], keys: tuple[str, ...], typo: str,
        field: str) -> None:
    """Also when the key meant is required: not `version: is required`."""
    path = write_release(tmp_path, _renamed(keys, typo))
    assert run_cli("--release", path, "rpms", "--build-dir", tmp_path / "b") == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {path}: {field}: unknown key; did you mean `{keys[-1]}`? "
                           "allowed keys here: "), line
    if keys[-1] in ("ref", "source"):  # an image: both keys listed (it said "none")
        assert line.endswith("allowed keys here: ref, source"), line


def test_debug_shows_the_traceback_and_keeps_exit_status_2(tmp_path: Path) -> None:
    path = write_release(tmp_path, _renamed(
        ("components", "core", "images", "pause", "source"), "sorce"))
    proc = subprocess.run([sys.executable, "-m", "builder", "--debug", "--release", str(path),
                           "rpms", "--build-dir", str(tmp_path / "b")],
                          capture_output=True, text=True, check=False, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback (most recent call last)" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: {path}: components.core.images.pause.sorce: unknown key; did you mean "
        "`source`? allowed keys here: ref, source")
    assert not (tmp_path / "b").exists()


def test_missing_release_file_is_a_clear_error(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("--release", tmp_path / "nope.yaml", "rpms",
                   "--build-dir", tmp_path / "b") == 2
    assert "nope.yaml: file not found" in capsys.readouterr().err


@pytest.mark.parametrize(("mutate", "field", "words"), [
    (lambda d: d["components"]["multus"].update(payload={"sample": "microshift"}),
     "components.multus.payload", "only core has a payload"),
    (lambda d: d["components"]["core"].update(payload={"path": "/etc"}),
     "components.core.payload.path", "is not a regular file"),
    (lambda d: d.update(base={"repos": [{"name": "x", "url": "ftp://mirror/x"}]}),
     "base.repos[0].url", "http(s):// or file://"),
])
def test_more_bad_release_fields_are_named(tmp_path: Path, mutate: object, field: str,
                                           words: str) -> None:
    with pytest.raises(InputError) as info:
        load_release(write_release(tmp_path, mutate))
    assert info.value.field == field and words in str(info.value)


@pytest.mark.parametrize(("text", "problem"), [
    (b"version: 4.14.2\nversion: 4.15.0\n", "line 2: not valid YAML: duplicate key 'version'"),
    (b"\xff\xfe\n", "not UTF-8 text"),
])
def test_unreadable_or_ambiguous_release_file_is_one_clear_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: bytes, problem: str) -> None:
    path = tmp_path / "release.yaml"
    path.write_bytes(text)
    assert run_cli("--release", path, "rpms", "--build-dir", tmp_path / "b") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {path}: {problem}"] or (
        len(err) == 1 and err[0].startswith(f"error: {path}: ") and problem in err[0])


def test_an_image_the_manifests_need_but_release_lacks_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_release(tmp_path, lambda d: d["components"].update({"networking-ovnk": {}}))
    assert run_cli("--release", path, "rpms", "--build-dir", tmp_path / "b") == 2
    err = capsys.readouterr().err
    assert "components.networking-ovnk.images.ovn-kubernetes: is missing" in err
    assert "Traceback" not in err


def test_global_options_also_work_after_the_command(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `nox -s build-image -- --release FILE` puts them there.
    path = write_release(tmp_path, lambda d: d.update(version="4.14-2"))
    assert run_cli("rpms", "--build-dir", tmp_path / "b", "--release", path) == 2
    assert f"error: {path}: version:" in capsys.readouterr().err


def test_build_image_rejects_an_unknown_image_before_any_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build = tmp_path / "b"
    assert run_cli("--release", RELEASE, "build-image", "--image", "nope",
                   "--build-dir", build) == 2
    assert "no image named 'nope'" in capsys.readouterr().err
    assert not build.exists()


def test_json_mode_reports_a_bad_input_as_one_json_event(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_release(tmp_path, lambda d: d.update(version="4.14-2"))
    assert run_cli("--json", "--release", path, "rpms", "--build-dir", tmp_path / "b") == 2
    # The tool's version, then the error: nothing else, every line JSON.
    started, event = (json.loads(line) for line in capsys.readouterr().err.strip().splitlines())
    assert started["event"] == "info" and started["version"] == __version__
    assert event["event"] == "error" and event["exit_code"] == 2
    assert event["message"].startswith(f"{path}: version:")
