"""The CI templates (ci/templates/): valid for their services, a matrix of every image
profile and architecture, the step cache keyed on the inputs, and their build and publish
commands run here, in their order, on the sample release with a release key of our own."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from builder.blueprint.render import BLUEPRINTS_DIR
from builder.release.model import load_release
from tests.support import requires
from tests.support.ci import (
    GITHUB,
    GITLAB,
    SETUP_STEPS,
    Transcript,
    emulate_artifacts,
    gitlab_matrix_job,
    load,
    run_github_job,
    run_gitlab_job,
    upload_paths,
    workspace,
)
from tests.support.cli import RELEASE
from tests.support.keys import make_release_key
from tests.support.ostree import IMAGE, device_repo, head, ostree, serve

INPUTS = ("release.yaml", "specs", "blueprints", "kickstart", "builder")
SCHEMAS = {GITHUB: "vendor.github-workflows", GITLAB: "vendor.gitlab-ci"}
REF = f"microshift/x86_64/{IMAGE}"

root_only = requires.root_only("compose runs rpm --root and keeps ownership")


def _venv_path() -> str:
    import sys

    return f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.mark.parametrize("template", [GITHUB, GITLAB], ids=["github", "gitlab"])
def test_template_validates_against_its_service_schema(template: Path, tmp_path: Path) -> None:
    proc = subprocess.run(["check-jsonschema", "--builtin-schema", SCHEMAS[template],
                           str(template)], capture_output=True, text=True, check=False,
                          env={**os.environ, "PATH": _venv_path()})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The schema is not vacuous: the same file with one job broken is refused.
    data = load(template)
    if template == GITHUB:
        del data["jobs"]["build"]["runs-on"]
    else:
        data["build"]["when"] = "sometimes"
    broken = tmp_path / template.name
    broken.write_text(yaml.safe_dump(data))
    proc = subprocess.run(["check-jsonschema", "--builtin-schema", SCHEMAS[template],
                           str(broken)], capture_output=True, text=True, check=False,
                          env={**os.environ, "PATH": _venv_path()})
    assert proc.returncode == 1, proc.stdout


def _profiles() -> set[str]:
    return set(yaml.safe_load((BLUEPRINTS_DIR / "profiles.yaml").read_text())["images"])


def test_matrices_build_every_profile_for_every_architecture() -> None:
    wanted = {(image, arch) for image in _profiles()
              for arch in load_release(RELEASE).architectures}
    matrix = load(GITHUB)["jobs"]["build"]["strategy"]["matrix"]
    assert {(i, a) for i in matrix["image"] for a in matrix["arch"]} == wanted
    gitlab = load(GITLAB)["build"]["parallel"]["matrix"]
    entries = set()
    for entry in gitlab:
        images = entry["IMAGE"] if isinstance(entry["IMAGE"], list) else [entry["IMAGE"]]
        arches = entry["ARCH"] if isinstance(entry["ARCH"], list) else [entry["ARCH"]]
        entries |= {(i, a) for i in images for a in arches}
    assert entries == wanted


def test_step_cache_is_keyed_on_every_input() -> None:
    cache = next(s for s in load(GITHUB)["jobs"]["build"]["steps"]
                 if str(s.get("uses", "")).startswith("actions/cache")
                 and s["with"]["path"] == "build/.steps")
    key = cache["with"]["key"]
    assert "matrix.arch" in key and "matrix.image" in key
    assert all(f"'{name}" in key for name in INPUTS), key
    gitlab = load(GITLAB)
    assert gitlab["build"]["cache"][0] == {"key": "steps-$ARCH-$IMAGE-$INPUTS_HASH",
                                           "paths": ["build/.steps/"]}
    hashing = " ".join(gitlab["plan"]["script"])
    assert all(f" {name}" in hashing for name in INPUTS), hashing


def test_delta_parts_are_cached_per_architecture_across_runs() -> None:
    """Every image of an architecture shares the parts (the executable's bsdiff, the
    images' layers), and a run restores the last run's: builder/delta/cache.py."""
    steps = load(GITHUB)["jobs"]["build"]["steps"]
    cache = next(s for s in steps if s.get("name") == "Delta part cache")
    assert cache["with"]["path"] == "build/cache/delta-parts"
    assert cache["with"]["restore-keys"].split() == ["delta-parts-${{", "matrix.arch",
                                                     "}}-"]
    assert steps.index(cache) < next(i for i, s in enumerate(steps) if s.get("name") == "Build")
    assert {"key": "delta-parts-$ARCH", "paths": ["build/cache/delta-parts/"]} in \
        load(GITLAB)["build"]["cache"]


def test_setup_steps_are_only_installs() -> None:
    """What the local runs skip only installs tools; every other `run:` step is run."""
    for job in load(GITHUB)["jobs"].values():
        skipped = [s for s in job["steps"] if s.get("id") in SETUP_STEPS]
        assert {s["id"] for s in skipped} == SETUP_STEPS
        assert all("install" in s["run"] for s in skipped)
    for name in ("build", "publish"):
        assert "extends" in load(GITLAB)[name]  # before_script (the installs) comes from it


@pytest.fixture(scope="module")
def release_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, Path]:
    """(fingerprint, armored secret key, public key file): the CI secret stand-in."""
    directory = tmp_path_factory.mktemp("release-key")
    homedir = directory / "gnupg"
    fingerprint = make_release_key(homedir)
    gpg = ["gpg", "--homedir", str(homedir), "--batch", "--armor"]
    secret = subprocess.run([*gpg, "--export-secret-keys", fingerprint], check=True,
                            capture_output=True, text=True).stdout
    public = directory / "release.asc"
    public.write_text(subprocess.run([*gpg, "--export", fingerprint], check=True,
                                     capture_output=True, text=True).stdout)
    subprocess.run(["gpgconf", "--homedir", str(homedir), "--kill", "gpg-agent"], check=False)
    return fingerprint, secret, public


def _check_published(target: Path, public: Path, tmp_path: Path) -> str:
    """A device trusting only the release key pulls the image's ref from the target."""
    repo = target / "repo"
    commit = head(repo, REF)
    assert commit is not None
    assert (target / "sbom" / REF / f"{commit}.spdx.json").is_file()
    assert json.loads((target / "updates" / REF / "report.json").read_text())["to_commit"] \
        == commit
    with serve(repo) as (url, _):
        device = device_repo(tmp_path / "device", url, public)
        pulled = ostree(f"--repo={device}", "pull", "origin", REF, check=False)
    assert pulled.returncode == 0, pulled.stderr
    assert head(device, f"origin:{REF}") == commit
    return commit


def _check_build(build: Path, fingerprint: str) -> None:
    assert (build / "installer" / f"{IMAGE}.iso").is_file()
    assert (build / "sbom" / f"{IMAGE}.spdx.json").is_file()
    assert (build / "deltas" / REF / "report.json").is_file()
    shown = ostree(f"--repo={build / 'ostree' / 'repo'}", "show", REF).stdout
    assert f"key ID {fingerprint[-16:]}" in shown  # signed with the release key


def _no_secret_in(transcript: Transcript, secret: str) -> None:
    assert "PRIVATE KEY" not in transcript.output
    body = [line for line in secret.splitlines() if len(line) > 40]
    assert body and not any(line in transcript.output for line in body)


@pytest.mark.integration
@root_only
def test_github_build_and_publish_steps_run_on_the_sample_release(
        release_key: tuple[str, str, Path], tmp_path: Path) -> None:
    fingerprint, secret, public = release_key
    workflow, cwd = load(GITHUB), workspace(tmp_path / "work")
    target = tmp_path / "target"
    values: dict[str, Any] = {
        "matrix.image": IMAGE, "matrix.arch": "x86_64", "secrets.RELEASE_SIGNING_KEY": secret,
        "vars.EDGE_PUBLISHED_URL": "", "vars.EDGE_PUBLISH_TARGET": str(target),
        "secrets.AWS_ACCESS_KEY_ID": "", "secrets.AWS_SECRET_ACCESS_KEY": "",
        "vars.AWS_DEFAULT_REGION": ""}
    transcript = Transcript()
    run_github_job(workflow, "build", values, cwd, transcript)
    _check_build(cwd / "build", fingerprint)
    assert all((cwd / path).exists() for path in upload_paths(workflow["jobs"]["build"]))
    assert f"Update paths to {REF}" in (cwd / ".github-github_step_summary").read_text()

    publisher = workspace(tmp_path / "publisher")
    emulate_artifacts(workflow["jobs"]["build"], cwd,
                      publisher / "artifacts" / f"edge-{IMAGE}-x86_64")
    run_github_job(workflow, "publish", values, publisher, transcript)
    _check_published(target, public, tmp_path)
    _no_secret_in(transcript, secret)


@pytest.mark.integration
@root_only
def test_gitlab_build_and_publish_scripts_run_on_the_sample_release(
        release_key: tuple[str, str, Path], tmp_path: Path) -> None:
    fingerprint, secret, public = release_key
    pipeline, cwd = load(GITLAB), workspace(tmp_path / "work")
    target = tmp_path / "target"
    variables = {"RELEASE_SIGNING_KEY": secret, "PUBLISH_TARGET": str(target)}
    _, matrix = gitlab_matrix_job(pipeline, "build")
    assert (matrix["IMAGE"], matrix["ARCH"]) == (IMAGE, "x86_64")
    transcript = Transcript()
    run_gitlab_job(pipeline, "build", variables, cwd, transcript)
    out = cwd / "out" / f"{IMAGE}-x86_64"
    _check_build(out, fingerprint)
    assert not (cwd / "signing.env").exists()  # after_script forgot the key
    run_gitlab_job(pipeline, "publish", variables, cwd, transcript)
    _check_published(target, public, tmp_path)
    _no_secret_in(transcript, secret)
