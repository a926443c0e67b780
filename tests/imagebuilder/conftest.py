"""Fixtures of the composer tests: a release whose images are (partly) in a registry, its
rendered-looking blueprint, the fake service for one distro, a client, the SAMPLE key."""

from __future__ import annotations

import io
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.core.signing import ensure_sample_key, stop_agent
from builder.imagebuilder.client import Endpoint, RetryPolicy, WeldrClient
from builder.release.model import Release, load_release
from tests.imagebuilder.fake_weldr import FakeWeldr, Scenario
from tests.support.cli import RELEASE

IMAGE = "microshift-edge"
REF = "microshift/x86_64/microshift-edge"
VERSION = "4.14.2-1"            # release.yaml 4.14.2, release 1: the blueprint's semver too
# A core image published to a registry (release.yaml without `source`), and one that is not.
PUBLISHED = ("quay.io/microshift-sample/service-ca@sha256:"
             "a23ff1bd42dacfe2d52596b0b8ed9202c26b5414bf62c47ead15ca8cff3327d6")
SAMPLE = ("quay.io/microshift-sample/router@sha256:"
          "16f495b1893581956c93fb326f01ee63c8b5a7d2b23dbacaf341d7e524178941")
BLUEPRINT = f"""\
name = "{IMAGE}"
description = "MicroShift whole stack"
version = "{VERSION}"

[[packages]]
name = "microshift"
version = "4.14.2-1"

[[packages]]
name = "microshift-networking-ovnk"
version = "4.14.2-1"

[[containers]]
source = "{PUBLISHED}"
name = "{PUBLISHED}"
tls-verify = true

[customizations.services]
enabled = ["microshift.service"]

[customizations.firewall]
ports = ["6443:tcp"]

[[customizations.files]]
path = "/etc/microshift/config.yaml"
mode = "0644"
user = "root"
group = "root"
data = "dns:\\n  baseDomain: example.com\\n"
"""


@pytest.fixture(scope="session")
def release_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample release with service-ca published to a registry (no `source`)."""
    data = yaml.safe_load(RELEASE.read_text())
    del data["components"]["core"]["images"]["service-ca"]["source"]
    path = tmp_path_factory.mktemp("release") / "release.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def release(release_file: Path) -> Release:
    return load_release(release_file)


@pytest.fixture(scope="session")
def sample_gpg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SAMPLE key for the session; copied into each build dir as DIR/gpg."""
    home = tmp_path_factory.mktemp("sample-key") / "gpg"
    key = ensure_sample_key(Runner(), Progress(stream=io.StringIO()), home, 1700000000)
    stop_agent(Runner(), key.homedir)
    return home


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # Unix socket paths are limited to 108 bytes; pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="weldr-", dir="/tmp") as tmp:
        yield Path(tmp)


def make_scenario(**settings: Any) -> Scenario:
    """A Scenario whose workers can pull the PUBLISHED image (and nothing else)."""
    settings.setdefault("registry", {PUBLISHED: PUBLISHED.rsplit("@", 1)[1]})
    return Scenario(**settings)


@pytest.fixture
def scenario() -> Scenario:
    return make_scenario()


@pytest.fixture
def distro() -> str:
    return "rhel-9"


@pytest.fixture
def fake(tmp_path: Path, socket_dir: Path, scenario: Scenario,
         distro: str) -> Iterator[FakeWeldr]:
    workdir = tmp_path / "fake"
    workdir.mkdir()
    with FakeWeldr(workdir, scenario, distro=distro) as server:
        server.serve_unix(socket_dir / "api.socket")
        yield server


@pytest.fixture
def build_dir(tmp_path: Path, sample_gpg: Path) -> Path:
    root = tmp_path / "build"
    (root / "blueprints").mkdir(parents=True)
    (root / "blueprints" / f"{IMAGE}.toml").write_text(BLUEPRINT)
    shutil.copytree(sample_gpg, root / "gpg", ignore=shutil.ignore_patterns("S.*"))
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
