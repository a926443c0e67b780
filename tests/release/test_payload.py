"""The core payload of several files, the data_backup setting, and release-ARCH.json."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from builder.core.errors import InputError
from builder.release.model import default_data_backup, load_release
from builder.release.payload import Payload
from builder.release.release_info import release_info_files
from builder.sources.samples import payload_standin
from tests.release.test_release import write_release
from tests.support.cli import RELEASE

CORE = "components.core"


def test_sample_payload_ships_every_file_of_a_real_release() -> None:
    files = load_release(RELEASE).payload_for("x86_64")
    assert [(f.install, f.mode_text, f.source.kind) for f in files] == [
        ("/usr/bin/microshift", "0755", "sample"),
        ("/usr/bin/microshift-etcd", "0755", "sample"),
        ("/usr/bin/microshift-cleanup-data", "0755", "sample"),
        ("/usr/bin/microshift-sos-report", "0755", "sample")]
    for file in files:
        text = payload_standin(file.source.location, "4.14.2").decode()
        # MicroShift's stand-in serves its API (greenboot asks it), in the image's Python.
        shell = "#!/usr/bin/python3\n" if file.install == "/usr/bin/microshift" else "#!/bin/sh\n"
        assert text.startswith(shell) and "SAMPLE stand-in" in text


def test_single_file_form_is_the_microshift_binary(tmp_path: Path) -> None:
    binary = tmp_path / "microshift"
    binary.write_bytes(b"\x7fELF not really\n")
    path = write_release(tmp_path, lambda d: d["components"]["core"].update(
        payload={"path": str(binary)}))
    [file] = load_release(path).payload_for("x86_64")
    assert (file.install, file.mode, file.source.location) == \
        ("/usr/bin/microshift", 0o755, str(binary))


def test_files_form_takes_paths_urls_and_modes(tmp_path: Path) -> None:
    etcd = tmp_path / "microshift-etcd"
    etcd.write_bytes(b"etcd\n")
    path = write_release(tmp_path, lambda d: d["components"]["core"].update(payload={"files": [
        {"install": "/usr/bin/microshift", "url": "https://example.invalid/microshift",
         "sha256": "a" * 64},
        {"install": "/usr/bin/microshift-etcd", "path": str(etcd), "mode": "0750"},
        {"install": "/usr/share/microshift/spec/config-openapi-spec.json",
         "sample": "microshift-sos-report", "mode": "0644"}]}))
    files = load_release(path).payload_for("x86_64")
    assert [(f.install, f.mode, f.source.kind) for f in files] == [
        ("/usr/bin/microshift", 0o755, "url"), ("/usr/bin/microshift-etcd", 0o750, "path"),
        ("/usr/share/microshift/spec/config-openapi-spec.json", 0o644, "sample")]
    assert len({f.name for f in files}) == 3  # unique names in the RPM's SOURCES


def _files(*entries: dict[str, str]) -> object:
    return lambda d: d["components"]["core"].update(payload={"files": list(entries)})


@pytest.mark.parametrize(("mutate", "field", "words"), [
    (_files({"install": "/usr/bin/microshift-etcd", "sample": "microshift-etcd"}),
     f"{CORE}.payload.files", "no entry with install: /usr/bin/microshift"),
    (_files({"install": "/usr/bin/microshift", "sample": "microshift"},
            {"install": "/usr/bin/microshift", "sample": "microshift-etcd"}),
     f"{CORE}.payload.files[1].install", "already installed by files[0]"),
    (_files({"install": "/etc/microshift/x", "sample": "microshift"}),
     f"{CORE}.payload.files[0].install", "under /usr/bin/"),
    (_files({"install": "/usr/bin/../sbin/microshift", "sample": "microshift"}),
     f"{CORE}.payload.files[0].install", "normalized absolute path"),
    (_files({"install": "/usr/bin/microshift", "sample": "microshift", "mode": "755x"}),
     f"{CORE}.payload.files[0].mode", "octal permission bits"),
    (_files({"install": "/usr/bin/microshift", "sample": "microshift", "mode": "0044"}),
     f"{CORE}.payload.files[0].mode", "the owner can read"),
    (_files({"install": "/usr/bin/microshift", "sample": "kubelet"}),
     f"{CORE}.payload.files[0].sample", "microshift, microshift-never-ready, microshift-etcd"),
    (_files({"install": "/usr/bin/microshift"}), f"{CORE}.payload.files[0]",
     "give exactly one of path, url (with sha256) or sample"),
    (_files({"install": "/usr/bin/microshift", "url": "https://x.invalid/m"}),
     f"{CORE}.payload.files[0].sha256", "is required with url"),
    # A local file is `path:`; the downloader speaks HTTP(S) only.
    (_files({"install": "/usr/bin/microshift", "url": "file:///srv/microshift",
             "sha256": "0" * 64}),
     f"{CORE}.payload.files[0].url", "an http(s):// URL (a local file is path:)"),
    (lambda d: d["components"]["core"].update(payload={"files": []}),
     f"{CORE}.payload.files", "is empty"),
    (lambda d: d["components"]["core"].update(data_backup="both"),
     f"{CORE}.data_backup", "allowed: microshift, greenboot"),
    (lambda d: d["components"]["multus"]["images"].update(
        router=d["components"]["multus"]["images"].pop("multus-cni")),
     "components.multus.images.router", "names another image than components.core.images"),
])
def test_bad_payload_and_settings_name_the_field(tmp_path: Path, mutate: object, field: str,
                                                 words: str) -> None:
    with pytest.raises(InputError) as info:
        load_release(write_release(tmp_path, mutate))
    assert info.value.field == field and words in str(info.value), str(info.value)


@pytest.mark.parametrize(("version", "who"), [
    ("4.13.9", "greenboot"), ("4.14.0~rc.1", "microshift"), ("4.14.2", "microshift"),
    ("4.15.0", "microshift"), ("5.0.0", "microshift"), ("nightly", "greenboot")])
def test_data_backup_defaults_to_the_binary_from_4_14_on(version: str, who: str) -> None:
    assert default_data_backup(version) == who


def test_data_backup_follows_the_version_unless_release_yaml_says(tmp_path: Path) -> None:
    assert load_release(RELEASE).data_backup == "greenboot"  # the sample says so
    path = write_release(tmp_path, lambda d: d["components"]["core"].pop("data_backup"))
    assert load_release(path).data_backup == "microshift"


def test_release_info_lists_every_release_image_by_digest_in_upstreams_format(
        tmp_path: Path) -> None:
    release = load_release(write_release(tmp_path, lambda d: d.update(
        architectures=["x86_64", "aarch64"])))
    files = release_info_files(release)
    assert sorted(files) == ["usr/share/microshift/release/release-aarch64.json",
                             "usr/share/microshift/release/release-x86_64.json"]
    info = json.loads(files["usr/share/microshift/release/release-x86_64.json"])
    assert info["release"] == {"base": "4.14.2"}
    assert info["images"] == {img.name: img.ref for img in release.images()}
    assert all("@sha256:" in ref for ref in info["images"].values())
    assert "pause" in info["images"]


def test_every_source_carries_its_location_sha256_and_field(tmp_path: Path) -> None:
    etcd = tmp_path / "microshift-etcd"
    etcd.write_bytes(b"etcd\n")
    etcd_sha = hashlib.sha256(b"etcd\n").hexdigest()
    path = write_release(tmp_path, _files(
        {"install": "/usr/bin/microshift", "url": "https://example.invalid/m", "sha256": "a" * 64},
        {"install": "/usr/bin/microshift-etcd", "path": str(etcd), "sha256": etcd_sha},
        {"install": "/usr/bin/microshift-sos-report", "sample": "microshift-sos-report"}))
    assert [f.source for f in load_release(path).payload_for("x86_64")] == [
        Payload("url", "https://example.invalid/m", "a" * 64, f"{CORE}.payload.files[0]"),
        Payload("path", str(etcd), etcd_sha, f"{CORE}.payload.files[1]"),
        Payload("sample", "microshift-sos-report", None, f"{CORE}.payload.files[2]")]
    (tmp_path / "single").mkdir()
    single = write_release(tmp_path / "single", lambda d: d["components"]["core"].update(
        payload={"path": str(etcd)}))
    assert [f.source for f in load_release(single).payload_for("x86_64")] == [
        Payload("path", str(etcd), None, f"{CORE}.payload")]


@pytest.mark.parametrize(("make", "problem"), [
    (lambda p: None, "payload file {p} does not exist (hint: build it first or fix the path)"),
    (lambda p: p.mkdir(), "{p} is not a regular file"),
    (lambda p: p.write_bytes(b"other\n"),
     "mismatch: {p} has sha256 " + hashlib.sha256(b"other\n").hexdigest() + ", release.yaml "
     "says " + "b" * 64),
])
def test_a_bad_local_payload_names_file_field_and_problem(tmp_path: Path, make: Any,
                                                         problem: str) -> None:
    local = tmp_path / "payload"
    make(local)
    field = "path" if "mismatch" not in problem else "sha256"
    release = write_release(tmp_path, _files(
        {"install": "/usr/bin/microshift", "path": str(local), "sha256": "b" * 64}))
    with pytest.raises(InputError) as info:
        load_release(release)
    assert str(info.value) == f"{release}: {CORE}.payload.files[0].{field}: " \
                              f"{problem.format(p=local)}"


def _per_arch(architectures: list[str], payload: dict[str, Any]) -> object:
    return lambda d: (d.update(architectures=architectures),
                      d["components"]["core"].update(payload=payload))


def test_each_architecture_takes_its_own_payload_in_either_form(tmp_path: Path) -> None:
    x86 = tmp_path / "microshift-x86_64"
    x86.write_bytes(b"x86_64 build\n")
    release = load_release(write_release(tmp_path, _per_arch(["x86_64", "aarch64"], {
        "x86_64": {"path": str(x86)},
        "aarch64": {"files": [
            {"install": "/usr/bin/microshift", "url": "https://example.invalid/arm",
             "sha256": "a" * 64},
            {"install": "/usr/bin/microshift-etcd", "sample": "microshift-etcd"}]}})))
    assert [(f.install, f.source) for f in release.payload_for("x86_64")] == [
        ("/usr/bin/microshift", Payload("path", str(x86), None, f"{CORE}.payload.x86_64"))]
    assert [(f.install, f.source) for f in release.payload_for("aarch64")] == [
        ("/usr/bin/microshift", Payload("url", "https://example.invalid/arm", "a" * 64,
                                        f"{CORE}.payload.aarch64.files[0]")),
        ("/usr/bin/microshift-etcd", Payload("sample", "microshift-etcd", None,
                                             f"{CORE}.payload.aarch64.files[1]"))]


def test_the_single_form_serves_every_architecture() -> None:
    release = load_release(RELEASE)
    assert not release.component("core").payload.per_arch
    assert release.payload_for("aarch64") == release.payload_for("x86_64")
    assert len(release.payload_for("aarch64")) == 4


def test_an_entry_for_an_architecture_the_release_does_not_build_is_unused(
        tmp_path: Path) -> None:
    """Not built, so not looked at: its local file need not exist (yet)."""
    release = load_release(write_release(tmp_path, _per_arch(["x86_64"], {
        "x86_64": {"sample": "microshift"},
        "aarch64": {"path": str(tmp_path / "not-built-yet")}})))
    assert [f.source.kind for f in release.payload_for("x86_64")] == ["sample"]
    with pytest.raises(KeyError, match=r"components\.core\.payload has no entry for aarch64"):
        release.payload_for("aarch64")


def test_a_release_architecture_without_its_payload_is_one_line(tmp_path: Path) -> None:
    path = write_release(tmp_path, _per_arch(["x86_64", "aarch64"], {
        "x86_64": {"sample": "microshift"}}))
    with pytest.raises(InputError) as info:
        load_release(path)
    assert str(info.value) == (
        f"{path}: {CORE}.payload.aarch64: is required: architectures lists aarch64 and the "
        "payload is given per architecture; allowed: an entry for each of x86_64, aarch64, "
        "or one payload (path, url, sample or files) for every architecture")


@pytest.mark.parametrize(("payload", "field", "words"), [
    ({"x86_64": {"sample": "microshift"}, "aarch64": {"files": [
        {"install": "/usr/bin/microshift", "url": "https://x.invalid/m"}]}},
     f"{CORE}.payload.aarch64.files[0].sha256", "is required with url"),
    ({"x86_64": {"sample": "microshift"}, "aarch64": {"files": [
        {"install": "/usr/bin/microshift", "sample": "microshift"},
        {"install": "/usr/bin/microshift", "sample": "microshift-etcd"}]}},
     f"{CORE}.payload.aarch64.files[1].install", "already installed by files[0]"),
    ({"x86_64": {"files": [{"install": "/usr/bin/microshift-etcd", "sample": "microshift"}]},
      "aarch64": {"sample": "microshift"}},
     f"{CORE}.payload.x86_64.files", "no entry with install: /usr/bin/microshift"),
    ({"x86_64": {"sample": "microshift"}, "aarch64": {"sha256": "a" * 64}},
     f"{CORE}.payload.aarch64", "give exactly one of path, url (with sha256) or sample"),
    ({"x86_64": {"sample": "microshift"}, "aarch64": {"path": "x", "files": []}},
     f"{CORE}.payload.aarch64.files", "is empty"),
    ({"x86_64": {"sample": "microshift"}, "aarch64": "microshift"},
     f"{CORE}.payload.aarch64", "expected a mapping, got 'microshift'"),
    ({"x86_64": {"sample": "microshift"}, "aarch64": {"sample": "microshift", "x86_64": {}}},
     f"{CORE}.payload.aarch64.x86_64", "unknown key; allowed keys here: files, path, sample"),
    ({"x86_64": {"sample": "microshift"}, "arm64": {"sample": "microshift"}},
     f"{CORE}.payload.arm64",
     "unknown key; did you mean `aarch64`? allowed keys here: aarch64, files, path, sample, "
     "sha256, url, x86_64"),
    ({"x86_64": {"sample": "microshift"}, "aarch64": {"sample": "microshift"},
      "files": [{"install": "/usr/bin/microshift", "sample": "microshift"}]},
     f"{CORE}.payload.files", "give either one payload for every architecture (files: ...) or "
     "one per architecture (x86_64, aarch64: ...), not both"),
])
def test_a_bad_per_architecture_payload_names_the_architecture_in_the_field(
        tmp_path: Path, payload: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(InputError) as info:
        load_release(write_release(tmp_path, _per_arch(["x86_64", "aarch64"], payload)))
    assert info.value.field == field and words in str(info.value), str(info.value)


def test_a_local_per_architecture_payload_is_checked_against_its_sha256(tmp_path: Path) -> None:
    local = tmp_path / "microshift-aarch64"
    local.write_bytes(b"aarch64 build")
    path = write_release(tmp_path, _per_arch(["x86_64", "aarch64"], {
        "x86_64": {"sample": "microshift"}, "aarch64": {"path": str(local), "sha256": "b" * 64}}))
    with pytest.raises(InputError) as info:
        load_release(path)
    assert str(info.value) == (
        f"{path}: {CORE}.payload.aarch64.sha256: mismatch: {local} has sha256 "
        f"{hashlib.sha256(b'aarch64 build').hexdigest()}, release.yaml says {'b' * 64}")
