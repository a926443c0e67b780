"""Before a compose installs anything, every locked RPM is there with the sha256 the lock
names; an RPM of a URL repository (a RHEL mirror) is downloaded over HTTP (a real server on
127.0.0.1) and refused when the mirror serves other bytes than the lock was made from."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from builder.compose.inputs import PackageFile
from builder.compose.rootfs import verify_packages
from builder.core.errors import BuildError
from builder.core.http_thread import ServedInThread

pytestmark = pytest.mark.integration

RPM = b"an RPM's bytes, as the lock saw them\n" * 1000
DIGEST = hashlib.sha256(RPM).hexdigest()


class Mirror(SimpleHTTPRequestHandler):
    requested: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.requested.append(self.path)
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A repository served over HTTP: (its URL, the directory it serves)."""
    served = tmp_path / "mirror"
    served.mkdir()
    Mirror.requested = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Mirror, directory=str(served)))
    with ServedInThread(httpd, "mirror") as server:
        yield server.url, served


def package(path: Path, url: str | None = None, sha256: str | None = DIGEST) -> PackageFile:
    return PackageFile("cri-o", 0, "1.27.1", "1.el9", "x86_64", path, sha256, url)


def test_a_locked_rpm_with_its_digest_passes(tmp_path: Path) -> None:
    rpm = tmp_path / "cri-o.rpm"
    rpm.write_bytes(RPM)
    verify_packages([package(rpm)], tmp_path / "lock.json")
    verify_packages([package(rpm, sha256=None)], tmp_path / "lock.json")  # a lock without


def test_a_missing_rpm_is_refused_naming_the_lock_and_package(tmp_path: Path) -> None:
    lock, rpm = tmp_path / "lock.json", tmp_path / "gone.rpm"
    with pytest.raises(BuildError) as refused:
        verify_packages([package(rpm)], lock)
    assert refused.value.message == (f"{lock}: package cri-o-1.27.1-1.el9.x86_64: {rpm} does "
                                     "not exist")
    assert refused.value.hint == "re-run `python -m builder blueprint` (depsolve) and `rpms`"


def test_an_rpm_changed_after_depsolve_is_refused(tmp_path: Path) -> None:
    lock, rpm = tmp_path / "lock.json", tmp_path / "cri-o.rpm"
    rpm.write_bytes(RPM + b"changed")
    with pytest.raises(BuildError) as refused:
        verify_packages([package(rpm)], lock)
    assert refused.value.message == (f"{lock}: package cri-o-1.27.1-1.el9.x86_64: {rpm} does "
                                     f"not match the locked sha256 {DIGEST}")
    assert refused.value.hint == "the RPM changed after depsolve; re-run `python -m builder " \
                                 "blueprint`"


def test_an_rpm_of_a_url_repository_is_downloaded_once(mirror: tuple[str, Path],
                                                       tmp_path: Path) -> None:
    url, served = mirror
    (served / "cri-o.rpm").write_bytes(RPM)
    dest = tmp_path / "cache" / "cri-o.rpm"
    locked = package(dest, f"{url}/cri-o.rpm")
    verify_packages([locked], tmp_path / "lock.json")
    assert dest.read_bytes() == RPM and Mirror.requested == ["/cri-o.rpm"]
    assert list(dest.parent.iterdir()) == [dest]  # no partial download left beside it
    verify_packages([locked], tmp_path / "lock.json")
    assert Mirror.requested == ["/cri-o.rpm"]  # the verified copy is used again


def test_a_cached_copy_that_no_longer_matches_is_downloaded_again(mirror: tuple[str, Path],
                                                                 tmp_path: Path) -> None:
    url, served = mirror
    (served / "cri-o.rpm").write_bytes(RPM)
    dest = tmp_path / "cri-o.rpm"
    dest.write_bytes(b"a download cut short")
    verify_packages([package(dest, f"{url}/cri-o.rpm")], tmp_path / "lock.json")
    assert dest.read_bytes() == RPM and Mirror.requested == ["/cri-o.rpm"]


def test_a_mirror_serving_other_bytes_is_refused(mirror: tuple[str, Path],
                                                 tmp_path: Path) -> None:
    url, served = mirror
    (served / "cri-o.rpm").write_bytes(RPM + b"rebuilt on the mirror")
    dest = tmp_path / "cache" / "cri-o.rpm"
    with pytest.raises(BuildError) as refused:
        verify_packages([package(dest, f"{url}/cri-o.rpm")], tmp_path / "lock.json")
    assert refused.value.message == (f"{url}/cri-o.rpm: downloaded file does not match the "
                                     f"locked sha256 {DIGEST}")
    assert refused.value.hint == "the repository changed; re-run depsolve"
    assert list(dest.parent.iterdir()) == []  # nothing of it kept


@pytest.mark.parametrize("path", ["/missing.rpm", None])
def test_a_mirror_that_fails_is_one_clear_error(path: str | None, mirror: tuple[str, Path],
                                                closed_port_url: str, tmp_path: Path) -> None:
    url = f"{mirror[0]}{path}" if path else f"{closed_port_url}/cri-o.rpm"
    dest = tmp_path / "cache" / "cri-o.rpm"
    with pytest.raises(BuildError) as refused:
        verify_packages([package(dest, url)], tmp_path / "lock.json")
    assert refused.value.message.startswith(
        f"cannot download cri-o-1.27.1-1.el9.x86_64 from {url}: ")
    assert ("404" in refused.value.message) == (path is not None)
    assert list(dest.parent.iterdir()) == []
