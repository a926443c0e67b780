"""release.yaml's `rpmlint.accept`: a release engineer accepts a justified rpmlint finding on
the release's own payload, with its reason, without editing the project. Real rpmbuild and
rpmlint on a payload that gcc links statically."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from builder.release.model import load_release
from builder.rpm.lint import PROJECT_HINT, lint_failure, rpmlintrc_text
from tests.release.test_release import write_release
from tests.support import requires as may_skip
from tests.support.cli import rpm_query, run_cli
from tests.support.ostree import copy_build

pytestmark = pytest.mark.integration

PROGRAM = '#include <stdio.h>\nint main(void) { puts(NAME " Version: 4.14.2"); return 0; }\n'
STATIC = "statically-linked-binary"
WHY = "Go binaries are built static on purpose"
FILES = ("/usr/bin/microshift", "/usr/bin/microshift-etcd")


@pytest.fixture(scope="module")
def static_binaries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of statically linked executables, one for each of FILES."""
    may_skip.need_tools("gcc")
    folder = tmp_path_factory.mktemp("static-payload")
    (folder / "program.c").write_text(PROGRAM)
    for install in FILES:
        name = Path(install).name
        proc = subprocess.run(["gcc", "-static", "-O2", f'-DNAME="{name}"', "-o",
                               str(folder / name), str(folder / "program.c")],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, ("gcc -static needs the static C library (Debian "
                                      f"libc6-dev, Fedora glibc-static):\n{proc.stderr}")
    return folder


@pytest.fixture
def any_binaries(tmp_path: Path) -> Path:
    """Payload files for release.yaml's checks, which come before any build."""
    folder = tmp_path / "payload"
    folder.mkdir()
    for install in FILES:
        (folder / Path(install).name).write_bytes(Path("/usr/bin/true").read_bytes())
    return folder


def static_release(tmp_path: Path, binaries: Path,
                   accept: list[dict[str, Any]] | None = None) -> Path:
    """The sample release whose payload is FILES from `binaries` (and `rpmlint.accept`)."""
    def mutate(doc: dict[str, Any]) -> None:
        doc["components"]["core"]["payload"] = {"files": [
            {"install": install, "path": str(binaries / Path(install).name)}
            for install in FILES]}
        if accept is not None:
            doc["rpmlint"] = {"accept": accept}
    return write_release(tmp_path, mutate)


@pytest.fixture(scope="module")
def static_rpms(static_binaries: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A build directory whose RPMs (built, not linted) carry the static payload."""
    folder = tmp_path_factory.mktemp("static-rpms")
    build = folder / "build"
    release = static_release(folder, static_binaries)
    assert run_cli("--release", release, "rpms", "--build-dir", build, "--no-lint") == 0
    return build


def lint(tmp_path: Path, static_rpms: Path, static_binaries: Path,
         accept: list[dict[str, Any]] | None, capsys: pytest.CaptureFixture[str],
         ) -> tuple[int, str, Path]:
    """`rpms` (whose RPMs are built already: only rpmlint runs) with this `rpmlint.accept`."""
    build = copy_build(static_rpms, tmp_path / "build")
    release = static_release(tmp_path, static_binaries, accept)
    capsys.readouterr()
    code = run_cli("--release", release, "rpms", "--build-dir", build)
    return code, capsys.readouterr().err, release


def test_a_static_payload_fails_naming_check_file_and_field_and_the_hint_makes_it_pass(
        tmp_path: Path, static_rpms: Path, static_binaries: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, err, release = lint(tmp_path / "refused", static_rpms, static_binaries, None, capsys)
    assert code == 1
    for path in FILES:
        assert f"microshift-core.x86_64: E: {STATIC} {path}\n" in err
    [hint] = [line for line in err.splitlines() if line.startswith("hint: ")]
    prefix = f"hint: if justified, accept it for your payload in {release}: rpmlint.accept: "
    assert hint.startswith(prefix), hint
    assert "specs/rpmlintrc" not in hint  # the payload is the release's, not the project's
    # What the hint says to add, with a reason, is what release.yaml needs.
    entries = yaml.safe_load(hint.removeprefix(prefix))
    assert entries == [{"check": STATIC, "path": path, "why": "..."} for path in FILES]
    accept = [{**entry, "why": f"{WHY} ({entry['path']})"} for entry in entries]
    code, err, release = lint(tmp_path / "accepted", static_rpms, static_binaries, accept, capsys)
    assert code == 0, err
    for path in FILES:
        assert f"rpmlint: accepted {STATIC} {path} (microshift-core): {WHY} ({path})\n" in err
    [core] = (tmp_path / "accepted/build/rpms").glob("microshift-core-*.x86_64.rpm")
    assert set(FILES) <= set(rpm_query("-qp", "--list", core).split())
    # The lint is cached with its acceptances; a rerun still shows what it accepted.
    assert run_cli("--release", release, "rpms", "--build-dir", tmp_path / "accepted/build") == 0
    err = capsys.readouterr().err
    assert "rpmlint: unchanged" in err
    assert f"rpmlint: accepted {STATIC} /usr/bin/microshift (microshift-core): {WHY}" in err


def test_an_acceptance_covers_its_own_file_only(
        tmp_path: Path, static_rpms: Path, static_binaries: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    accept = [{"check": STATIC, "path": "/usr/bin/microshift", "why": WHY}]
    code, err, _ = lint(tmp_path, static_rpms, static_binaries, accept, capsys)
    assert code == 1
    assert f"E: {STATIC} /usr/bin/microshift-etcd\n" in err
    assert f"E: {STATIC} /usr/bin/microshift\n" not in err
    assert f"[{{check: {STATIC}, path: /usr/bin/microshift-etcd, why: ...}}]" in err
    assert "rpmlint: accepted" not in err  # a failed lint applied nothing


def test_an_acceptance_of_a_finding_rpmlint_does_not_report_names_its_field(
        tmp_path: Path, static_rpms: Path, static_binaries: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Another check on the file accepts nothing, and the stale entry is named to remove."""
    accept = [{"check": STATIC, "path": "/usr/bin/microshift-etcd", "why": WHY},
              {"check": "missing-PT_GNU_STACK-section", "path": "/usr/bin/microshift",
               "why": WHY}]
    code, err, release = lint(tmp_path, static_rpms, static_binaries, accept, capsys)
    assert code == 1
    assert f"E: {STATIC} /usr/bin/microshift\n" in err
    assert "E: unused-rpmlintrc-filter" in err
    assert ("rpmlint reported no missing-PT_GNU_STACK-section on /usr/bin/microshift: remove "
            f"rpmlint.accept[1] from {release}") in err


@pytest.mark.parametrize(("entry", "expected"), [
    ({"check": STATIC, "path": "/usr/bin/microshift"}, ("rpmlint.accept[0].why", "is required")),
    ({"check": STATIC, "path": "/usr/bin/microshift", "why": ""},
     ("rpmlint.accept[0].why", "'' is not allowed; allowed: why the finding is justified")),
    ({"check": STATIC, "path": "/usr/bin/microshift", "why": " \t"},
     ("rpmlint.accept[0].why", "' \\t' is not allowed; allowed: why the finding is justified")),
    ({"check": STATIC, "path": "/usr/bin/true", "why": WHY},
     ("rpmlint.accept[0].path", "'/usr/bin/true' is not a file of the release's payload; "
      "allowed: /usr/bin/microshift, /usr/bin/microshift-etcd (components.core.payload")),
    ({"check": STATIC, "path": "/usr/lib/systemd/system/microshift.service", "why": WHY},
     ("rpmlint.accept[0].path", "the project's own files are filtered in specs/rpmlintrc")),
    ({"check": "statically linked", "path": "/usr/bin/microshift", "why": WHY},
     ("rpmlint.accept[0].check", "'statically linked' is not allowed; allowed: an rpmlint "
      "check name")),
])
def test_a_bad_acceptance_is_an_input_error_naming_its_field(
        tmp_path: Path, any_binaries: Path, capsys: pytest.CaptureFixture[str],
        entry: dict[str, Any], expected: tuple[str, str]) -> None:
    field, words = expected
    release = static_release(tmp_path, any_binaries, [entry])
    build = tmp_path / "build"
    assert run_cli("--release", release, "rpms", "--build-dir", build) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {release}: {field}: ") and words in line, line
    assert not build.exists()


def test_the_same_finding_accepted_twice_is_an_input_error(
        tmp_path: Path, any_binaries: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entry = {"check": STATIC, "path": "/usr/bin/microshift", "why": WHY}
    release = static_release(tmp_path, any_binaries, [entry, {**entry, "why": "again"}])
    assert run_cli("--release", release, "rpms", "--build-dir", tmp_path / "build") == 2
    assert f"error: {release}: rpmlint.accept[1]: accepts {STATIC} on /usr/bin/microshift " \
           "again (rpmlint.accept[0])" in capsys.readouterr().err


def test_a_lint_failure_gives_each_kind_of_error_its_own_hint(
        tmp_path: Path, any_binaries: Path) -> None:
    """A finding on a payload file, one on a project file, and an unused acceptance."""
    accept = [{"check": "missing-PT_GNU_STACK-section", "path": "/usr/bin/microshift-etcd",
               "why": WHY}]
    release = load_release(static_release(tmp_path, any_binaries, accept))
    unused = re.findall(r'^addFilter\(r"(.*)"\)$', rpmlintrc_text(release), re.M)[-1]
    assert "missing-PT_GNU_STACK-section /usr/bin/microshift-etcd" in unused
    error = lint_failure(release, [
        f"microshift-core.x86_64: E: {STATIC} /usr/bin/microshift",
        "microshift-greenboot.noarch: E: non-standard-dir-perm /var/lib/greenboot 700",
        f'microshift-update.noarch: E: unused-rpmlintrc-filter "{unused}"'], "")
    assert error.hint == (
        f"if justified, accept it for your payload in {release.path}: rpmlint.accept: "
        f"[{{check: {STATIC}, path: /usr/bin/microshift, why: ...}}]; rpmlint reported no "
        f"missing-PT_GNU_STACK-section on /usr/bin/microshift-etcd: remove rpmlint.accept[0] "
        f"from {release.path} (or correct its check or path); {PROJECT_HINT}")
