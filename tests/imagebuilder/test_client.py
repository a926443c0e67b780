"""The Weldr client against the fake service: answers, errors, retries, timeouts, compose ids.

The fake follows osbuild/osbuild-composer internal/weldr/api.go (see tests/imagebuilder/fake_*.py
for each shape and status code it copies); no live osbuild-composer runs here.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from builder.cli import main
from builder.core.errors import BuildError
from builder.core.progress import Progress
from builder.imagebuilder.client import (
    ComposerError,
    Endpoint,
    WeldrClient,
    normalize_uuid,
)
from builder.imagebuilder.request import ComposeOptions
from builder.imagebuilder.wait import WaitOptions, wait_for_compose
from tests.imagebuilder.conftest import BLUEPRINT, IMAGE, REF, VERSION, Sleeps, make_scenario
from tests.imagebuilder.fake_weldr import FakeWeldr

UUID = "0b6d1f0e-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
PUSH = "POST /api/v1/blueprints/new"


def start(client: WeldrClient, image_type: str = "edge-commit") -> str:
    client.push_blueprint(BLUEPRINT)
    request = ComposeOptions("commit", REF).request(IMAGE, image_type, parent=None, url=None)
    return client.start_compose(request).uuid


def test_depsolve_returns_the_package_set(client: WeldrClient) -> None:
    client.push_blueprint(BLUEPRINT)
    names = {p["name"] for p in client.depsolve(IMAGE)}
    assert names == {"microshift", "microshift-networking-ovnk"}


@pytest.mark.parametrize("distro", ["rhel-9", "fedora", "rhel-10"])
def test_compose_types_are_what_the_distro_builds(client: WeldrClient, distro: str) -> None:
    offered = client.compose_types()
    ostree = [name for name in offered
              if name in ("edge-commit", "edge-installer", "iot-commit", "iot-installer")]
    assert ostree == {"rhel-9": ["edge-commit", "edge-installer"],
                      "fedora": ["iot-commit", "iot-installer"], "rhel-10": []}[distro]
    assert "qcow2" in offered or "generic-qcow2" in offered


@pytest.mark.parametrize("form", [UUID.upper(), "{" + UUID + "}", "urn:uuid:" + UUID,
                                  UUID.replace("-", ""), "URN:UUID:" + UUID.upper()])
def test_compose_ids_in_any_uuid_form_are_normalized(form: str) -> None:
    assert normalize_uuid(form) == UUID


@pytest.mark.parametrize("text", ["not-a-uuid", UUID[:-1], UUID + "0", "{" + UUID,
                                  UUID.replace("-", ":"), "g" * 32])
def test_what_is_not_a_uuid_is_not_normalized(text: str) -> None:
    assert normalize_uuid(text) is None


def test_status_of_an_upper_case_id_finds_the_compose(client: WeldrClient) -> None:
    uuid = start(client)
    for form in (uuid.upper(), "{" + uuid.upper() + "}", "urn:uuid:" + uuid):
        status = client.status(form)
        assert status.uuid == uuid
        assert status.version == VERSION


def test_warnings_null_in_the_answer_is_no_warnings(client: WeldrClient,
                                                    fake: FakeWeldr) -> None:
    client.push_blueprint(BLUEPRINT)
    request = ComposeOptions("commit", REF).request(IMAGE, "edge-commit", parent=None, url=None)
    started = client.start_compose(request)
    assert started.warnings == ()
    assert fake.compose_requests()[0]["compose_type"] == "edge-commit"


def test_unknown_blueprint(client: WeldrClient) -> None:
    request = ComposeOptions("commit", REF).request("nope", "edge-commit", parent=None, url=None)
    with pytest.raises(ComposerError, match="UnknownBlueprint: Unknown blueprint name: nope"):
        client.start_compose(request)
    with pytest.raises(ComposerError, match="UnknownBlueprint: nope: blueprint not found"):
        client.depsolve("nope")
    assert client.blueprint_info("nope") is None


def test_unknown_uuid(client: WeldrClient, socket_dir: Path,
                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ComposerError, match="UnknownUUID: not-a-uuid is not a valid build uuid"):
        client.status("not-a-uuid")
    rc = main(["composer", "status", UUID.upper(), "--socket", str(socket_dir / "api.socket")])
    err = capsys.readouterr().err
    assert rc == 1
    assert f"error: composer: UnknownUUID: compose {UUID} does not exist" in err


def test_cli_refuses_a_malformed_compose_id_in_one_line(
        fake: FakeWeldr, socket_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["composer", "status", "1234", "--socket", str(socket_dir / "api.socket")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.strip().splitlines() == [
        "error: command line: UUID: '1234' is not a compose id; give the build_id the compose "
        "printed, e.g. 0b6d1f0e-1c2d-4e5f-8a9b-0c1d2e3f4a5b"]
    assert fake.requests == []


# -- transport failures -------------------------------------------------------------------


def test_unreachable_socket_is_one_clear_line(build_dir: Path, socket_dir: Path,
                                              release_file: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    missing = socket_dir / "nothing-here.socket"
    rc = main(["--release", str(release_file), "composer", "compose", "--image", IMAGE,
               "--build-dir", str(build_dir), "--ref", REF, "--socket", str(missing)])
    err = capsys.readouterr().err
    assert rc != 0
    assert f"error: composer: cannot reach osbuild-composer at socket {missing}" in err
    assert "systemctl enable --now osbuild-composer.socket" in err
    assert "Traceback" not in err
    assert not (build_dir / "ostree").exists()


def test_unreachable_url_names_the_url(sleeps: Sleeps, closed_port_url: str) -> None:
    url = closed_port_url
    client = WeldrClient(Endpoint(socket=None, url=url), sleep=sleeps)
    with pytest.raises(BuildError, match=f"cannot reach osbuild-composer at URL {url}"):
        client.push_blueprint(BLUEPRINT)
    assert sleeps == []  # nothing listens: retrying cannot help


@pytest.mark.parametrize("scenario", [make_scenario(faults={PUSH: [503, 502]})])
def test_transient_503_is_retried_with_backoff(client: WeldrClient, fake: FakeWeldr,
                                               sleeps: Sleeps) -> None:
    client.push_blueprint(BLUEPRINT)
    assert fake.paths("POST").count("/api/v1/blueprints/new") == 3
    assert sleeps == [0.01, 0.02]
    assert IMAGE in fake.blueprints


@pytest.mark.parametrize("scenario", [make_scenario(faults={"GET /api/v1/compose/status/": [0]})])
def test_dropped_connection_is_retried(client: WeldrClient, fake: FakeWeldr,
                                       sleeps: Sleeps) -> None:
    uuid = start(client)
    assert client.status(uuid).queue_status == "WAITING"
    assert len(sleeps) == 1


@pytest.mark.parametrize("scenario", [make_scenario(faults={PUSH: [503] * 9})])
def test_retries_are_bounded(client: WeldrClient, fake: FakeWeldr, sleeps: Sleeps) -> None:
    with pytest.raises(ComposerError, match="HTTP503"):
        client.push_blueprint(BLUEPRINT)
    assert fake.paths("POST").count("/api/v1/blueprints/new") == 4
    assert sleeps == [0.01, 0.02, 0.04]


@pytest.mark.parametrize("scenario", [make_scenario(faults={PUSH: [400]})])
def test_400_is_not_retried(client: WeldrClient, fake: FakeWeldr, sleeps: Sleeps) -> None:
    with pytest.raises(ComposerError) as err:
        client.push_blueprint(BLUEPRINT)
    assert err.value.status_code == 400
    assert fake.paths("POST").count("/api/v1/blueprints/new") == 1
    assert sleeps == []


@pytest.mark.parametrize("scenario", [make_scenario(status_delay=1.0)])
def test_request_timeout_is_a_clear_error(socket_dir: Path, fake: FakeWeldr) -> None:
    client = WeldrClient(Endpoint(socket=socket_dir / "api.socket"), timeout=0.2)
    with pytest.raises(BuildError) as err:
        client.status(UUID)
    assert "no answer from socket" in err.value.message
    assert "within 0.2s" in err.value.message
    assert err.value.hint is not None and "--timeout" in err.value.hint


@pytest.mark.parametrize("scenario", [make_scenario(states=("WAITING",))])
def test_compose_wait_gives_up_after_wait_timeout(socket_dir: Path, fake: FakeWeldr) -> None:
    now = [0.0]

    def tick(seconds: float) -> None:
        now[0] += seconds

    client = WeldrClient(Endpoint(socket=socket_dir / "api.socket"), sleep=tick,
                         clock=lambda: now[0])
    uuid = start(client)
    progress = Progress(stream=io.StringIO())
    with pytest.raises(BuildError, match=f"compose {uuid} is still WAITING after 1m00s"):
        wait_for_compose(client, uuid, progress, WaitOptions(poll_interval=10, timeout=60))


