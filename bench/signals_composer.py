"""`composer compose` for `python -m bench signals`, against the in-repo fake Weldr service.

osbuild-composer cannot run here; tests/imagebuilder/fake_weldr.py answers as it does. For each
run of `composer compose` and its rerun a fresh FakeWeldr serves in a thread of the bench
process (so no process of its own names the run's work directory, which left_behind()
looks for), on a unix socket under a short /tmp directory, and is stopped afterwards.

The service's workers pull [[containers]] from a registry, so `composer compose` refuses
the release's SAMPLE images (builder/imagebuilder/blueprints.py check_for_release): the runs use
a copy of the release without `source`, as if its images were published, and the fake's
registry holds every image of the release by its digest (as tests/imagebuilder/conftest.py
make_scenario does for one). The build directory is a copy of the bench's base build: its
rendered blueprint (blueprints/NAME.toml and lock), its ostree repo and SAMPLE key.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.imagebuilder.fake_weldr import FakeWeldr, Scenario

IMAGE = "microshift-full"      # what the base build-image renders and composes


@dataclass(frozen=True)
class Weldr:
    """Where the fake services of one bench run live, and what they are given."""

    release: Path                  # the release with its images "published" (no `source`)
    registry: dict[str, str]       # image ref -> digest: what the fake's workers can pull
    sockets: Path                  # a short /tmp directory: a socket and a workdir per run

    def socket(self, work: Path) -> Path:
        return self.sockets / f"{work.name}.socket"

    @contextmanager
    def serving(self, work: Path) -> Iterator[None]:
        """A fresh fake service for the run in `work` and its rerun; stopped afterwards."""
        workdir = self.sockets / work.name
        workdir.mkdir()
        scenario = Scenario(registry=dict(self.registry))
        with FakeWeldr(workdir, scenario, distro="rhel-9") as server:
            server.serve_unix(self.socket(work))
            yield


def published_release(release: Path, into: Path) -> tuple[Path, dict[str, str]]:
    """A copy of `release` whose images are all in a registry, and that registry."""
    data: dict[str, Any] = yaml.safe_load(release.read_text())
    registry: dict[str, str] = {}
    for component in (data.get("components") or {}).values():
        for image in ((component or {}).get("images") or {}).values():
            image.pop("source", None)
            registry[image["ref"]] = image["ref"].rsplit("@", 1)[1]
    into.mkdir(parents=True, exist_ok=True)
    path = into / release.name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path, registry


@contextmanager
def weldr(release: Path, scratch: Path) -> Iterator[Weldr]:
    """The bench run's Weldr setup; its /tmp directory is removed at the end."""
    published, registry = published_release(release, scratch / "composer-release")
    # Unix socket paths are limited to 107 bytes, and the fake must not sit under a work dir.
    sockets = Path(tempfile.mkdtemp(prefix="weldr-", dir="/tmp"))
    try:
        yield Weldr(published, registry, sockets)
    finally:
        shutil.rmtree(sockets, ignore_errors=True)


def compose_argv(service: Weldr, cli: Callable[..., list[str]],
                 build_dir: Callable[[Path], Path]) -> Callable[[Path], list[str]]:
    """work -> the `composer compose` argv against that run's fake (a rerun runs the same)."""
    def prepare(work: Path) -> list[str]:
        return cli(service.release, "composer", "compose", "--image", IMAGE, "--build-dir",
                   str(build_dir(work)), "--socket", str(service.socket(work)),
                   "--poll-interval", "1")

    return prepare
