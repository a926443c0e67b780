"""The composer client's fixes, each against the fake service as osbuild-composer behaves
(tests/imagebuilder/fake_*.py cite the upstream handlers): image types by distro, the release
version in what is published, no version drift, chained commits, normalized ids, the ASCII
ref rule, warnings, installers, containers the workers cannot pull, errors as one line."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest

from builder.cli import main
from builder.core.errors import BuildError, InputError
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.imagebuilder.client import WeldrClient
from builder.imagebuilder.remote import ComposeJob, check_job, run_compose
from builder.imagebuilder.request import ComposeOptions
from builder.imagebuilder.results import ComposeResult
from builder.imagebuilder.wait import WaitOptions
from builder.release.model import Release
from tests.imagebuilder.conftest import (
    BLUEPRINT,
    IMAGE,
    PUBLISHED,
    REF,
    SAMPLE,
    VERSION,
    make_scenario,
)
from tests.imagebuilder.fake_weldr import FakeWeldr

STAMPS = {"rhel-9": ("edge", "9.6"), "fedora": ("iot", "42")}


def compose(client: WeldrClient, build_dir: Path, release: Release, image_type: str = "commit",
            **job: str) -> tuple[ComposeResult, str]:
    out = io.StringIO()
    options = ComposeOptions(image_type, REF, url=job.pop("url", None))
    result = run_compose(client, ComposeJob(build_dir, IMAGE, release, options,
                                            WaitOptions(poll_interval=0), **job),  # type: ignore[arg-type]
                         Progress(stream=out), Runner())
    return result, out.getvalue()


def ostree(repo: Path, *args: str) -> str:
    return subprocess.run(["ostree", f"--repo={repo}", *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def meta(repo: Path, commit: str, key: str) -> str:
    return ostree(repo, "show", f"--print-metadata-key={key}", commit).strip("'")


def cli(release_file: Path, socket_dir: Path, *args: str | Path) -> int:
    return main(["--release", str(release_file), "composer", *map(str, args),
                 "--socket", str(socket_dir / "api.socket")])


def compose_cli(release_file: Path, socket_dir: Path, build_dir: Path, *args: str) -> int:
    return cli(release_file, socket_dir, "compose", "--image", IMAGE, "--build-dir", build_dir,
               "--ref", REF, "--poll-interval", "0", *args)


def one_line(err: str) -> str:
    """The refusal: one `error:` line and no `hint:` (progress lines may come before it)."""
    lines = [ln for ln in err.splitlines() if ln.startswith(("error:", "hint:", "    "))]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert "Traceback" not in err
    return lines[0]


# -- image types by distro ----------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("distro", ["rhel-9", "fedora"])
def test_commit_type_is_the_one_the_service_offers_and_is_published_as_the_release(
        client: WeldrClient, fake: FakeWeldr, build_dir: Path, release: Release,
        distro: str) -> None:
    family, stamp = STAMPS[distro]
    result, out = compose(client, build_dir, release)
    assert [r["compose_type"] for r in fake.compose_requests()] == [f"{family}-commit"]
    assert result.compose_type == f"{family}-commit"
    repo = build_dir / "ostree" / "repo"
    assert result.commit is not None
    head = ostree(repo, "rev-parse", REF)
    assert head == result.commit.commit
    # The release version, not the distro's the service stamped; that one is recorded.
    assert meta(repo, head, "version") == VERSION
    assert meta(repo, head, "microshift.composer.version") == stamp
    assert result.commit.service_version == stamp
    (uuid,) = fake.composes
    assert meta(repo, head, "microshift.composer.commit") == fake.composes[uuid].commit
    assert meta(repo, head, "ostree.bootable") == "true"  # the service's metadata is kept
    # Same tree as the service built: nothing re-hashed, nothing changed.
    service_tree = ostree(repo, "ls", "-R", "-C", head)
    assert "/usr/share/fake-composer/packages/microshift" in service_tree
    assert f"version {VERSION}" in out
    record = json.loads((build_dir / "composer" / f"{IMAGE}-{uuid}.json").read_text())
    assert (record["version"], record["service_version"]) == (VERSION, stamp)


@pytest.mark.parametrize("distro", ["rhel-10"])
def test_a_service_without_ostree_types_is_refused_in_one_line(
        fake: FakeWeldr, socket_dir: Path, build_dir: Path, release_file: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    rc = compose_cli(release_file, socket_dir, build_dir)
    line = one_line(capsys.readouterr().err)
    assert rc == 1
    assert line.startswith(f"error: composer: the service at socket {socket_dir}/api.socket "
                           "offers no ostree commit type (edge-commit or iot-commit); it "
                           "offers: ami, azure, ")
    assert "RHEL 10 builds neither: use a RHEL 9 (edge-*) or Fedora (iot-*) service" in line
    assert fake.paths() == ["/api/v1/compose/types"]


def test_an_explicit_type_the_service_lacks_is_refused_naming_what_it_offers(
        fake: FakeWeldr, socket_dir: Path, build_dir: Path, release_file: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    rc = compose_cli(release_file, socket_dir, build_dir, "--type", "iot-commit")
    line = one_line(capsys.readouterr().err)
    assert rc == 1
    assert "does not offer iot-commit; it offers: " in line
    assert "edge-commit, edge-container, edge-installer" in line
    assert "Use --type commit to take whichever of edge-commit or iot-commit it has" in line
    assert fake.blueprints == {}


# -- versions -----------------------------------------------------------------------------


@pytest.mark.integration
def test_recompose_neither_pushes_again_nor_drifts_the_version(
        client: WeldrClient, fake: FakeWeldr, build_dir: Path, release: Release) -> None:
    first, _ = compose(client, build_dir, release)
    second, out = compose(client, build_dir, release)
    assert fake.pushes[IMAGE] == 1
    assert "the service holds it already, not pushed again" in out
    assert [client.status(r.uuid).version for r in (first, second)] == [VERSION, VERSION]
    # A changed blueprint with the same version replaces the held one, unbumped.
    path = build_dir / "blueprints" / f"{IMAGE}.toml"
    path.write_text(BLUEPRINT.replace('ports = ["6443:tcp"]', 'ports = ["6443:tcp", "80:tcp"]'))
    third, _ = compose(client, build_dir, release)
    assert client.status(third.uuid).version == VERSION
    assert fake.blueprints[IMAGE]["customizations"]["firewall"]["ports"] == ["6443:tcp", "80:tcp"]
    assert "DELETE" in {r.method for r in fake.requests}


def test_a_blueprint_of_another_release_is_refused_in_one_line(
        fake: FakeWeldr, socket_dir: Path, build_dir: Path, release_file: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = build_dir / "blueprints" / f"{IMAGE}.toml"
    path.write_text(BLUEPRINT.replace(f'version = "{VERSION}"', 'version = "4.14.1-3"', 1))
    rc = compose_cli(release_file, socket_dir, build_dir)
    line = one_line(capsys.readouterr().err)
    assert rc == 2
    assert line == (f"error: {path}: version: '4.14.1-3' is not this release's ({VERSION}, "
                    f"release.yaml {VERSION}); render it again: python -m builder blueprint "
                    f"--image {IMAGE} --build-dir {build_dir}")
    assert fake.requests == []


# -- chaining -----------------------------------------------------------------------------


@pytest.mark.integration
def test_commits_chain_to_the_previous_one_served_to_the_workers(
        client: WeldrClient, fake: FakeWeldr, build_dir: Path, release: Release) -> None:
    first, out1 = compose(client, build_dir, release, serve="127.0.0.1:0")
    assert "nothing to serve" in out1  # no commit yet: the first one has no parent
    second, out2 = compose(client, build_dir, release, serve="127.0.0.1:0")
    assert first.commit is not None and second.commit is not None
    assert second.commit.parent == first.commit.commit
    repo = build_dir / "ostree" / "repo"
    assert f"Parent:  {first.commit.commit}" in ostree(repo, "show", second.commit.commit)
    requests = fake.compose_requests()
    assert requests[0]["ostree"] == {"ref": REF, "parent": "", "url": ""}
    assert requests[1]["ostree"]["parent"] == first.commit.commit
    assert requests[1]["ostree"]["url"].startswith("http://127.0.0.1:")
    assert "serving" in out2
    # The workers built on it too: the service's commit names it as parent.
    assert fake.composes[second.uuid].parent == first.commit.commit


@pytest.mark.integration
def test_commits_chain_without_a_url_too(client: WeldrClient, fake: FakeWeldr,
                                         build_dir: Path, release: Release) -> None:
    first, _ = compose(client, build_dir, release)
    second, _ = compose(client, build_dir, release)
    assert first.commit is not None and second.commit is not None
    assert (first.commit.parent, second.commit.parent) == (None, first.commit.commit)
    assert all(r["ostree"]["url"] == "" for r in fake.compose_requests())


# -- ids, refs, warnings, installers ------------------------------------------------------


@pytest.mark.integration
def test_status_and_fetch_accept_any_form_of_the_id(
        client: WeldrClient, fake: FakeWeldr, socket_dir: Path, build_dir: Path, *,
        release_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    client.push_blueprint(BLUEPRINT)
    request = ComposeOptions("commit", REF).request(IMAGE, "edge-commit", parent=None, url=None)
    uuid = client.start_compose(request).uuid
    fake.scenario.states = ("FINISHED",)
    assert cli(release_file, socket_dir, "status", uuid.upper()) == 0
    assert capsys.readouterr().out.strip() == f"{uuid} FINISHED edge-commit {IMAGE} {VERSION}"
    assert cli(release_file, socket_dir, "fetch", "{" + uuid.upper() + "}", "--image", IMAGE,
               "--build-dir", build_dir) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{uuid} edge-commit {build_dir}/composer/{IMAGE}-{uuid}-commit.tar"
    assert out[1].startswith(f"{REF} ") and out[1].endswith(f" {VERSION}")


@pytest.mark.parametrize("ref", ["microshift/x86_64/mícroshift", "microshift/x86_64/\uff4d"])
def test_refs_follow_the_services_ascii_rule(fake: FakeWeldr, socket_dir: Path,
                                            build_dir: Path, release_file: Path, *, ref: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli(release_file, socket_dir, "compose", "--image", IMAGE, "--build-dir", build_dir,
             "--ref", ref)
    line = one_line(capsys.readouterr().err)
    assert rc == 2
    assert line == (f"error: command line: --ref: {ref!r} is not a valid ostree ref: use "
                    "slash-separated words of ASCII letters, digits, '_', '-' and '.'")
    assert fake.requests == []
    ComposeOptions("commit", "rhel/9/x86_64/edge_1.0-a").validate()


@pytest.mark.integration
def test_service_warnings_are_shown(client: WeldrClient, build_dir: Path,
                                    release: Release) -> None:
    path = build_dir / "blueprints" / f"{IMAGE}.toml"
    path.write_text(BLUEPRINT + '\n[customizations.kernel]\nappend = "quiet"\n')
    result, out = compose(client, build_dir, release)
    warning = ('blueprint validation failed for image type "edge-commit": '
               "customizations.kernel.append: not supported")
    assert result.warnings == (warning,)
    assert f"service warning: {warning}" in out


@pytest.mark.integration
@pytest.mark.parametrize("distro", ["rhel-9", "fedora"])
def test_installer_gets_only_what_it_supports_and_names_the_release_commit(
        client: WeldrClient, fake: FakeWeldr, build_dir: Path, release: Release,
        distro: str) -> None:
    family, _ = STAMPS[distro]
    commit, _ = compose(client, build_dir, release)
    assert commit.commit is not None
    result, out = compose(client, build_dir, release, "installer", serve="127.0.0.1:0")
    assert result.compose_type == f"{family}-installer"
    assert result.warnings == ()
    held = fake.blueprints[f"{IMAGE}-installer"]
    assert (held["packages"], held["containers"], held.get("customizations")) == ([], [], None)
    assert held["version"] == VERSION
    assert "leaves them out" in out and "packages, containers, customizations.services" in out
    iso = build_dir / "installer" / f"{IMAGE}.iso"
    assert iso.read_bytes().endswith(f"{REF}={commit.commit.commit}".encode())
    manifest = json.loads((build_dir / "installer" / f"{IMAGE}.json").read_text())
    assert (manifest["commit"], manifest["version"], manifest["signed"]) == (
        commit.commit.commit, VERSION, False)


# -- containers the workers cannot pull ---------------------------------------------------


def test_a_sample_image_is_refused_before_any_request(
        fake: FakeWeldr, socket_dir: Path, build_dir: Path, release_file: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = build_dir / "blueprints" / f"{IMAGE}.toml"
    path.write_text(BLUEPRINT.replace(PUBLISHED, SAMPLE))
    rc = compose_cli(release_file, socket_dir, build_dir)
    line = one_line(capsys.readouterr().err)
    assert rc == 2
    assert line.startswith(f"error: {release_file}: components.core.images.router.source: "
                           "SAMPLE images are generated on this machine and are in no registry, "
                           "but the service's workers pull [[containers]] from a registry")
    assert line.endswith("push a real image there and set `ref` to it by digest, and drop "
                         "`source`")
    assert fake.requests == []


def test_a_local_transport_is_refused_before_any_request(
        client: WeldrClient, fake: FakeWeldr, build_dir: Path, release: Release) -> None:
    path = build_dir / "blueprints" / f"{IMAGE}.toml"
    path.write_text(BLUEPRINT.replace(f'source = "{PUBLISHED}"',
                                      'source = "oci-archive:/srv/images/router.tar"'))
    with pytest.raises(InputError) as err:
        compose(client, build_dir, release)
    assert err.value.field == "containers[0].source"
    assert "skopeo copy oci-archive:/srv/images/router.tar docker://REGISTRY/NAME:TAG" in \
        err.value.message
    assert fake.requests == []


# -- service errors -----------------------------------------------------------------------


@pytest.mark.parametrize(("scenario", "expected"), [
    (make_scenario(registry={}), "error: composer: ContainerResolveError: Error resolving "
     "container: reading manifest sha256:a23ff1bd"),
    (make_scenario(depsolve_error="nothing provides cri-o"),
     f"error: composer: BlueprintsError: {IMAGE}: nothing provides cri-o"),
])
def test_service_errors_are_reported_without_a_traceback(
        fake: FakeWeldr, socket_dir: Path, build_dir: Path, release_file: Path, *,
        expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = compose_cli(release_file, socket_dir, build_dir)
    err = capsys.readouterr().err
    assert rc == 1
    assert f"\n{expected}" in err
    assert "Traceback" not in err
    assert not (build_dir / "ostree").exists()


@pytest.mark.parametrize("scenario", [make_scenario(states=("WAITING", "RUNNING", "FAILED"))])
def test_failed_compose_names_the_uuid_and_shows_the_log_tail(
        client: WeldrClient, fake: FakeWeldr, build_dir: Path, release: Release) -> None:
    with pytest.raises(BuildError) as err:
        compose(client, build_dir, release)
    (uuid,) = fake.composes
    message = err.value.message
    assert message.startswith(f"composer: compose {uuid} FAILED (edge-commit of blueprint "
                              f"{IMAGE} {VERSION}); last log lines:\n")
    assert "conflicts with microshift-networking-bridge" in message
    assert "stage org.osbuild.rpm failed" in message
    assert err.value.hint == (f"full log: GET /api/v1/compose/log/{uuid} "
                              f"(composer-cli compose log {uuid})")
    assert not any(p.startswith("/api/v1/compose/image/") for p in fake.paths())
    assert not (build_dir / "ostree").exists()


def test_parent_without_url_is_refused_before_any_request(
        fake: FakeWeldr, socket_dir: Path, build_dir: Path, release_file: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    rc = compose_cli(release_file, socket_dir, build_dir, "--parent", REF)
    line = one_line(capsys.readouterr().err)
    assert rc == 2
    assert line == ("error: command line: --parent: a parent needs --url (the ostree repo "
                    "that holds it) or --serve-repo")
    assert fake.requests == []


@pytest.mark.parametrize(("options", "serve", "message"), [
    (ComposeOptions("installer", REF), None,
     "command line: --url: an installer needs --url (the ostree repo serving the commit to "
     "install) or --serve-repo"),
    (ComposeOptions("commit", REF), "0.0.0.0:8000",
     "command line: --serve-repo: 0.0.0.0 is not an address the workers can reach; give this "
     "machine's address, e.g. 10.0.0.5:8000"),
    (ComposeOptions("commit", REF), "builder",
     "command line: --serve-repo: 'builder' is not HOST:PORT; give this machine's address as "
     "the workers reach it, e.g. 10.0.0.5:8000"),
    (ComposeOptions("commit", REF, url="10.0.0.5/repo"), None,
     "command line: --url: '10.0.0.5/repo' is not a URL; e.g. http://10.0.0.1:8080/repo/"),
    (ComposeOptions("commit", "a" * 64), None,
     f"command line: --ref: '{'a' * 64}' looks like a commit checksum; give a ref such as "
     "microshift/x86_64/microshift-full"),
])
def test_options_are_refused_in_one_line_before_anything_is_sent(
        build_dir: Path, release: Release, options: ComposeOptions, serve: str | None,
        message: str) -> None:
    with pytest.raises(InputError) as err:
        check_job(ComposeJob(build_dir, IMAGE, release, options, serve=serve))
    assert err.value.message == message
    assert err.value.hint is None
