"""--arch: one of the release's architectures per CI matrix job."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.context import Context
from builder.core.errors import InputError
from tests.support.cli import RELEASE, run_cli


def test_arch_narrows_the_release_to_that_architecture(tmp_path: Path) -> None:
    release = tmp_path / "release.yaml"
    release.write_text(RELEASE.read_text().replace("architectures: [x86_64]",
                                                   "architectures: [x86_64, aarch64]"))
    assert Context(tmp_path, release).release.architectures == ("x86_64", "aarch64")
    assert Context(tmp_path, release, arch="aarch64").release.architectures == ("aarch64",)


def test_an_architecture_the_release_does_not_have_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InputError, match="'aarch64' is not an architecture of"):
        _ = Context(tmp_path, RELEASE, arch="aarch64").release
    assert run_cli("--arch", "aarch64", "blueprint", "--image", "microshift-full",
                   "--build-dir", tmp_path) == 2
    assert "--arch: 'aarch64' is not an architecture of" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
