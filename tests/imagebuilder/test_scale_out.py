"""Issue 20's acceptance run: the release composed twice in a row on an Image Builder service
(the fake, as RHEL 9), from the command line, as a release engineer scales out.

The two commits must be chained parent to child and carry the release version; `composer
status` must show the same blueprint version both times; the static delta from the first to
the second must be generated, and the delta report and the installer manifest must name the
release version, exactly as after two local composes.
"""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest

from builder.cli import main
from builder.context import Context
from builder.core.progress import Progress
from builder.publish.deltas import generate_deltas
from tests.imagebuilder.conftest import IMAGE, REF, VERSION
from tests.imagebuilder.fake_weldr import FakeWeldr


def show(repo: Path, commit: str) -> str:
    return subprocess.run(["ostree", f"--repo={repo}", "show", commit], capture_output=True,
                          text=True, check=True).stdout


@pytest.mark.integration
def test_two_composes_on_the_service_chain_and_keep_the_release_version(
        fake: FakeWeldr, socket_dir: Path, build_dir: Path, release_file: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--release", str(release_file), "composer"]
    where = ["--socket", str(socket_dir / "api.socket")]
    commits, uuids = [], []
    for _ in range(2):
        assert main([*common, "compose", "--image", IMAGE, "--build-dir", str(build_dir),
                     "--ref", REF, "--serve-repo", "127.0.0.1:0", "--poll-interval", "0",
                     *where]) == 0
        first, second = capsys.readouterr().out.splitlines()
        uuid, compose_type, _ = first.split()
        ref, commit, version = second.split()
        assert (compose_type, ref, version) == ("edge-commit", REF, VERSION)
        uuids.append(uuid)
        commits.append(commit)
    for uuid in uuids:
        assert main([*common, "status", uuid, *where]) == 0
        assert capsys.readouterr().out.split() == [uuid, "FINISHED", "edge-commit", IMAGE,
                                                   VERSION]
    assert fake.pushes[IMAGE] == 1

    repo = build_dir / "ostree" / "repo"
    assert f"Parent:  {commits[0]}" in show(repo, commits[1])
    for commit in commits:
        assert f"Version: {VERSION}" in show(repo, commit)
    assert fake.compose_requests()[1]["ostree"]["parent"] == commits[0]

    ctx = Context(build_dir=build_dir, release_path=release_file,
                  progress=Progress(stream=io.StringIO()))
    report = generate_deltas(ctx, REF)
    assert report.to_commit == commits[1]
    assert report.to_version == VERSION
    (from_first,) = [p for p in report.paths if p.from_commit == commits[0]]
    assert from_first.from_version == VERSION
    assert from_first.delta_bytes > 0
    text = (build_dir / "deltas" / REF / "report.txt").read_text()
    assert f"(version {VERSION})" in text and f"{VERSION} ({commits[0][:12]})" in text

    assert main(["--release", str(release_file), "installer", "--image", IMAGE, "--build-dir",
                 str(build_dir), "--ref", REF]) == 0
    manifest = json.loads((build_dir / "installer" / f"{IMAGE}.json").read_text())
    assert (manifest["commit"], manifest["version"], manifest["signed"]) == (
        commits[1], VERSION, True)
