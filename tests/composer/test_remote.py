"""Contract tests of the Image Builder client against tests/fake_weldr.py.

The fake follows osbuild/osbuild-composer internal/weldr/api.go and compose.go (see the
fake's docstring for each shape and status code it copies); no live osbuild-composer runs here.
"""

from __future__ import annotations

import io
import json
import socket
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.cli import main
from builder.composer.client import ComposerError, Endpoint, RetryPolicy, WeldrClient
from builder.composer.importer import import_commit_tarball
from builder.composer.remote import (
    ComposeOptions,
    ComposeResult,
    WaitOptions,
    run_compose,
    wait_for_compose,
)
from builder.core.errors import BuildError
from builder.core.progress import Progress
from builder.core.runner import Runner
from tests.composer.fake_weldr import FakeWeldr, Scenario

IMAGE = "microshift-edge"
REF = "rhel/9/x86_64/edge"
BLUEPRINT = f"""\
name = "{IMAGE}"
description = "MicroShift whole stack"
version = "0.1.0"

[[packages]]
name = "microshift"
version = "4.15.0-1.el9"

[[packages]]
name = "microshift-networking-ovnk"
version = "4.15.0-1.el9"
"""


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # Unix socket paths are limited to 108 bytes; pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="weldr-", dir="/tmp") as tmp:
        yield Path(tmp)


@pytest.fixture
def scenario() -> Scenario:
    return Scenario()


@pytest.fixture
def fake(tmp_path: Path, socket_dir: Path, scenario: Scenario) -> Iterator[FakeWeldr]:
    workdir = tmp_path / "fake"
    workdir.mkdir()
    with FakeWeldr(workdir, scenario) as server:
        server.serve_unix(socket_dir / "api.socket")
        yield server


@pytest.fixture
def build_dir(tmp_path: Path) -> Path:
    root = tmp_path / "build"
    (root / "blueprints").mkdir(parents=True)
    (root / "blueprints" / f"{IMAGE}.toml").write_text(BLUEPRINT)
    return root


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def client(socket_dir: Path, fake: FakeWeldr, sleeps: Sleeps) -> Iterator[WeldrClient]:
    c = WeldrClient(Endpoint(socket=socket_dir / "api.socket"), timeout=5.0,
                    retry=RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.04),
                    sleep=sleeps)
    yield c
    c.close()


def quiet() -> tuple[Progress, io.StringIO]:
    out = io.StringIO()
    return Progress(stream=out), out


def compose(client: WeldrClient, build_dir: Path, compose_type: str = "edge-commit",
            url: str | None = None) -> tuple[ComposeResult, str]:
    progress, out = quiet()
    result = run_compose(client, build_dir=build_dir, image=IMAGE,
                         options=ComposeOptions(compose_type, REF, url=url),
                         wait=WaitOptions(poll_interval=0), progress=progress, runner=Runner())
    return result, out.getvalue()


# -- success ------------------------------------------------------------------------------


@pytest.mark.integration
def test_cli_compose_edge_commit_imports_the_commit_into_the_local_repo(
        fake: FakeWeldr, socket_dir: Path, build_dir: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["composer", "compose", "--image", IMAGE, "--build-dir", str(build_dir),
               "--type", "edge-commit", "--ref", REF, "--socket", str(socket_dir / "api.socket"),
               "--poll-interval", "0"])
    out, err = capsys.readouterr()
    assert rc == 0, err

    # The blueprint went up as TOML, exactly as rendered, then the compose request.
    push = next(r for r in fake.requests if r.path == "/api/v1/blueprints/new")
    assert push.content_type == "text/x-toml"
    assert push.body.decode() == BLUEPRINT
    start = next(r for r in fake.requests if r.path == "/api/v1/compose")
    assert json.loads(start.body) == {"blueprint_name": IMAGE, "compose_type": "edge-commit",
                                      "branch": "master",
                                      "ostree": {"ref": REF, "parent": "", "url": ""}}
    assert fake.paths()[:2] == ["/api/v1/blueprints/new", f"/api/v1/blueprints/depsolve/{IMAGE}"]

    # Progress shows each queue state with elapsed time.
    (uuid,) = fake.composes
    for state in ("WAITING", "RUNNING", "FINISHED"):
        assert f"compose {uuid}: {state} (" in err
    assert "elapsed" in err

    # The commit landed in DIR/ostree/repo on the ref, equal to compose.json's checksum.
    repo = build_dir / "ostree" / "repo"
    head = subprocess.run(["ostree", f"--repo={repo}", "rev-parse", REF], check=True,
                          capture_output=True, text=True).stdout.strip()
    assert head == fake.commits[uuid]
    assert "mode=archive" in (repo / "config").read_text()
    assert (repo / "summary").is_file()
    tarball = build_dir / "composer" / f"{IMAGE}-{uuid}-commit.tar"
    assert tarball.is_file()
    assert not list(tarball.parent.glob(".*.part"))
    assert f"{REF} {head}" in out


def test_edge_installer_over_tcp_downloads_the_iso(tmp_path: Path, build_dir: Path) -> None:
    workdir = tmp_path / "fake"
    workdir.mkdir()
    with FakeWeldr(workdir) as server:
        url = server.serve_tcp()
        client = WeldrClient(Endpoint(socket=None, url=url), timeout=5.0)
        result, out = compose(client, build_dir, "edge-installer", url="http://10.0.0.1/repo/")
        client.close()
    iso = build_dir / "installer" / f"{IMAGE}.iso"
    assert result.artifact == iso
    assert b"CD001 fake installer ISO" in iso.read_bytes()
    assert f"wrote {iso}" in out
    assert "downloading" in out
    start = next(r for r in server.requests if r.path == "/api/v1/compose")
    assert json.loads(start.body)["ostree"]["url"] == "http://10.0.0.1/repo/"


def test_cli_depsolve_status_wait_and_fetch(client: WeldrClient, fake: FakeWeldr,
                                           socket_dir: Path, build_dir: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    sock = ["--socket", str(socket_dir / "api.socket")]
    assert main(["composer", "push", "--image", IMAGE, "--build-dir", str(build_dir), *sock]) == 0
    assert main(["composer", "depsolve", "--image", IMAGE, *sock]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "microshift-4.15.0-1.el9.x86_64", "microshift-networking-ovnk-4.15.0-1.el9.x86_64"]

    options = ComposeOptions("edge-installer", REF, url="http://10.0.0.1/repo/")
    uuid = client.start_compose(options.request(IMAGE))
    assert main(["composer", "status", uuid, "--wait", "--poll-interval", "0", *sock]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == f"{uuid} FINISHED edge-installer {IMAGE} 0.1.0"
    assert f"compose {uuid}: RUNNING" in err

    assert main(["composer", "fetch", uuid, "--image", IMAGE, "--build-dir", str(build_dir),
                 *sock]) == 0
    iso = build_dir / "installer" / f"{IMAGE}.iso"
    assert capsys.readouterr().out.strip() == f"{uuid} edge-installer {iso}"
    assert iso.read_bytes().endswith(uuid.encode())


def test_depsolve_returns_the_package_set(client: WeldrClient, build_dir: Path) -> None:
    client.push_blueprint(BLUEPRINT)
    names = {p["name"] for p in client.depsolve(IMAGE)}
    assert names == {"microshift", "microshift-networking-ovnk"}


# -- service errors -----------------------------------------------------------------------


@pytest.mark.parametrize("scenario", [Scenario(depsolve_error="DNF error: conflicting "
                                               "requests: microshift-networking-bridge")])
def test_depsolve_error_stops_before_any_compose(client: WeldrClient, fake: FakeWeldr,
                                                 build_dir: Path) -> None:
    with pytest.raises(ComposerError) as err:
        compose(client, build_dir)
    assert str(err.value).startswith(f"composer: BlueprintsError: {IMAGE}: DNF error")
    assert "microshift-networking-bridge" in str(err.value)
    assert "/api/v1/compose" not in fake.paths()


@pytest.mark.parametrize("scenario", [Scenario(depsolve_error="nothing provides cri-o")])
def test_depsolve_error_on_compose_is_reported_and_not_retried(
        client: WeldrClient, fake: FakeWeldr, sleeps: Sleeps) -> None:
    client.push_blueprint(BLUEPRINT)
    with pytest.raises(ComposerError) as err:
        client.start_compose(ComposeOptions("edge-commit", REF).request(IMAGE))
    assert err.value.message == "composer: DepsolveError: nothing provides cri-o"
    assert err.value.status_code == 500
    assert fake.paths("POST").count("/api/v1/compose") == 1
    assert sleeps == []


@pytest.mark.parametrize("scenario", [Scenario(states=("WAITING", "RUNNING", "FAILED"))])
def test_failed_compose_names_the_uuid_and_shows_the_log_tail(
        client: WeldrClient, fake: FakeWeldr, build_dir: Path) -> None:
    with pytest.raises(BuildError) as err:
        compose(client, build_dir)
    (uuid,) = fake.composes
    message = err.value.message
    assert f"compose {uuid} FAILED" in message
    assert "conflicts with microshift-networking-bridge" in message
    assert "stage org.osbuild.rpm failed" in message
    assert f"/api/v1/compose/log/{uuid}" in fake.paths()
    assert not any(p.startswith("/api/v1/compose/image/") for p in fake.paths())
    assert not (build_dir / "ostree").exists()


def test_unknown_blueprint(client: WeldrClient) -> None:
    with pytest.raises(ComposerError, match="UnknownBlueprint: Unknown blueprint name: nope"):
        client.start_compose(ComposeOptions("edge-commit", REF).request("nope"))
    with pytest.raises(ComposerError, match="UnknownBlueprint: nope: blueprint not found"):
        client.depsolve("nope")


def test_unknown_uuid(client: WeldrClient, socket_dir: Path,
                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ComposerError, match="UnknownUUID: not-a-uuid is not a valid build uuid"):
        client.status("not-a-uuid")
    missing = "0b6d1f0e-0000-4000-8000-000000000000"
    rc = main(["composer", "status", missing, "--socket", str(socket_dir / "api.socket")])
    err = capsys.readouterr().err
    assert rc == 1
    assert f"error: composer: UnknownUUID: compose {missing} does not exist" in err


# -- transport failures -------------------------------------------------------------------


def test_unreachable_socket_is_one_clear_line(build_dir: Path, socket_dir: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    missing = socket_dir / "nothing-here.socket"
    rc = main(["composer", "compose", "--image", IMAGE, "--build-dir", str(build_dir),
               "--socket", str(missing)])
    err = capsys.readouterr().err
    assert rc != 0
    assert f"error: composer: cannot reach osbuild-composer at socket {missing}" in err
    assert "systemctl enable --now osbuild-composer.socket" in err
    assert "Traceback" not in err
    assert not (build_dir / "ostree").exists()


def test_unreachable_url_names_the_url(sleeps: Sleeps) -> None:
    url = closed_port_url()
    client = WeldrClient(Endpoint(socket=None, url=url), sleep=sleeps)
    with pytest.raises(BuildError, match=f"cannot reach osbuild-composer at URL {url}"):
        client.push_blueprint(BLUEPRINT)
    assert sleeps == []  # nothing listens: retrying cannot help


@pytest.mark.parametrize("scenario", [Scenario(faults={"POST /api/v1/blueprints/new": [503, 502]})])
def test_transient_503_is_retried_with_backoff(client: WeldrClient, fake: FakeWeldr,
                                               sleeps: Sleeps) -> None:
    client.push_blueprint(BLUEPRINT)
    assert fake.paths("POST").count("/api/v1/blueprints/new") == 3
    assert sleeps == [0.01, 0.02]
    assert IMAGE in fake.blueprints


@pytest.mark.parametrize("scenario", [Scenario(faults={"GET /api/v1/compose/status/": [0]})])
def test_dropped_connection_is_retried(client: WeldrClient, fake: FakeWeldr,
                                       sleeps: Sleeps) -> None:
    client.push_blueprint(BLUEPRINT)
    uuid = client.start_compose(ComposeOptions("edge-commit", REF).request(IMAGE))
    assert client.status(uuid).queue_status == "WAITING"
    assert len(sleeps) == 1


@pytest.mark.parametrize("scenario", [Scenario(faults={"POST /api/v1/blueprints/new": [503] * 9})])
def test_retries_are_bounded(client: WeldrClient, fake: FakeWeldr, sleeps: Sleeps) -> None:
    with pytest.raises(ComposerError, match="HTTP503"):
        client.push_blueprint(BLUEPRINT)
    assert fake.paths("POST").count("/api/v1/blueprints/new") == 4
    assert sleeps == [0.01, 0.02, 0.04]


@pytest.mark.parametrize("scenario", [Scenario(faults={"POST /api/v1/blueprints/new": [400]})])
def test_400_is_not_retried(client: WeldrClient, fake: FakeWeldr, sleeps: Sleeps) -> None:
    with pytest.raises(ComposerError) as err:
        client.push_blueprint(BLUEPRINT)
    assert err.value.status_code == 400
    assert fake.paths("POST").count("/api/v1/blueprints/new") == 1
    assert sleeps == []


@pytest.mark.parametrize("scenario", [Scenario(status_delay=1.0)])
def test_request_timeout_is_a_clear_error(socket_dir: Path, fake: FakeWeldr) -> None:
    client = WeldrClient(Endpoint(socket=socket_dir / "api.socket"), timeout=0.2)
    with pytest.raises(BuildError) as err:
        client.status("0b6d1f0e-0000-4000-8000-000000000000")
    assert "no answer from socket" in err.value.message
    assert "within 0.2s" in err.value.message
    assert err.value.hint is not None and "--timeout" in err.value.hint


@pytest.mark.parametrize("scenario", [Scenario(states=("WAITING",))])
def test_compose_wait_gives_up_after_wait_timeout(socket_dir: Path, fake: FakeWeldr) -> None:
    now = [0.0]

    def tick(seconds: float) -> None:
        now[0] += seconds

    client = WeldrClient(Endpoint(socket=socket_dir / "api.socket"), sleep=tick,
                         clock=lambda: now[0])
    client.push_blueprint(BLUEPRINT)
    uuid = client.start_compose(ComposeOptions("edge-commit", REF).request(IMAGE))
    progress, _ = quiet()
    with pytest.raises(BuildError, match=f"compose {uuid} is still WAITING after 1m00s"):
        wait_for_compose(client, uuid, progress, WaitOptions(poll_interval=10, timeout=60))


# -- input checks and import integrity ----------------------------------------------------


def test_parent_without_url_is_refused_before_any_request(
        fake: FakeWeldr, socket_dir: Path, build_dir: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["composer", "compose", "--image", IMAGE, "--build-dir", str(build_dir),
               "--parent", REF, "--socket", str(socket_dir / "api.socket")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "command line: --parent: a parent needs --url" in err
    assert fake.requests == []


@pytest.mark.integration
def test_tampered_commit_tarball_leaves_the_local_repo_alone(
        client: WeldrClient, fake: FakeWeldr, tmp_path: Path) -> None:
    client.push_blueprint(BLUEPRINT)
    uuid = client.start_compose(ComposeOptions("edge-commit", REF).request(IMAGE))
    fake.scenario.states = ("FINISHED",)
    client.status(uuid)
    good = tmp_path / "good.tar"
    client.download_image(uuid, good, quiet()[0])
    bad = tmp_path / "bad.tar"
    with tarfile.open(good) as src, tarfile.open(bad, "w") as dst:
        for member in src.getmembers():
            data = src.extractfile(member) if member.isfile() else None
            if member.name == "./compose.json":
                meta = json.loads(data.read()) if data else {}
                meta["ostree-commit"] = "f" * 64
                raw = json.dumps(meta).encode()
                member.size = len(raw)
                data = io.BytesIO(raw)
            dst.addfile(member, data)
    repo = tmp_path / "ostree" / "repo"
    with pytest.raises(BuildError, match=r"but compose.json says f{64}"):
        import_commit_tarball(bad, repo, Runner(), quiet()[0], expected_ref=REF)
    refs = subprocess.run(["ostree", f"--repo={repo}", "refs"], check=True,
                          capture_output=True, text=True).stdout
    assert refs.strip() == ""


def closed_port_url() -> str:
    """A TCP URL on which nothing listens (a port bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
