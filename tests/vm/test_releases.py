"""The two releases a VM scenario builds, derived from the run's release file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from builder.baseos.bootable import BootableBase
from builder.context import Context
from builder.core.errors import InputError
from builder.vm.releases import next_version, write_release_files
from tests.support.cli import RELEASE

BASE = BootableBase(Path("/b/baseos/repo"), "sample/debian12/x86_64/base", "0" * 64, "6.1",
                    built=False)


def test_v2_is_the_next_patch_release_an_hour_later_on_the_bootable_base(
        tmp_path: Path) -> None:
    v1_path, v2_path = write_release_files(Context(tmp_path, RELEASE), BASE, tmp_path, False)
    v1, v2 = (yaml.safe_load(p.read_text()) for p in (v1_path, v2_path))
    assert v1["ostree"]["base"] == {"repo": "/b/baseos/repo",
                                    "ref": "sample/debian12/{arch}/base"}
    assert (v1["version"], v2["version"]) == ("4.14.2", "4.14.3")
    assert v2["source_date_epoch"] == v1["source_date_epoch"] + 3600
    assert v1["components"] == v2["components"]


def test_a_bad_v2_carries_the_microshift_whose_api_never_becomes_ready(tmp_path: Path) -> None:
    _, v2_path = write_release_files(Context(tmp_path, RELEASE), BASE, tmp_path, True)
    files = yaml.safe_load(v2_path.read_text())["components"]["core"]["payload"]["files"]
    assert {"install": "/usr/bin/microshift", "sample": "microshift-never-ready"} in files


def test_relative_paths_stay_valid_and_a_real_payload_cannot_be_made_bad(
        tmp_path: Path) -> None:
    release = yaml.safe_load(RELEASE.read_text())
    release["components"]["core"]["payload"] = {"path": "bin/microshift"}
    release["components"]["core"]["images"]["pause"]["source"] = "oci-archive:img/pause.tar"
    source = tmp_path / "rel" / "release.yaml"
    for name in ("bin/microshift", "img/pause.tar"):
        (source.parent / name).parent.mkdir(parents=True, exist_ok=True)
        (source.parent / name).write_bytes(b"SAMPLE")
    source.write_text(yaml.safe_dump(release))
    v1_path, _ = write_release_files(Context(tmp_path, source), BASE, tmp_path / "out", False)
    core = yaml.safe_load(v1_path.read_text())["components"]["core"]
    assert core["payload"]["path"] == str(source.parent / "bin/microshift")
    assert core["images"]["pause"]["source"] == f"oci-archive:{source.parent}/img/pause.tar"
    with pytest.raises(InputError) as caught:
        write_release_files(Context(tmp_path, source), BASE, tmp_path / "out", True)
    assert caught.value.field == "components.core.payload.files"


def test_versions_that_are_not_numbered_get_a_suffix() -> None:
    assert next_version("4.14.9") == "4.14.10"
    assert next_version("4.14.0-rc.1") == "4.14.0-rc.2"
    assert next_version("nightly") == "nightly.1"
