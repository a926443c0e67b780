"""Helpers for the compose and delta tests: build dirs with composed releases, a device repo,
an HTTP server that records what a pull fetched."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from builder.cli import main
from builder.release.model import load_release
from builder.sources.samples import write_oci_layout
from tests.support.cli import PROJECT_ROOT, RELEASE

IMAGE = "microshift-full"
CHANGED_IMAGE = "router"  # the image composed_pair's second release ships a new build of


@dataclass(frozen=True)
class ComposedPair:
    """A build dir where release 1 and then release 2 (version bumped) were composed."""

    build_dir: Path
    release1: Path
    release2: Path
    ref: str
    commit1: str
    commit2: str

    @property
    def repo(self) -> Path:
        return self.build_dir / "ostree" / "repo"

    @property
    def public_key(self) -> Path:
        return self.build_dir / "gpg" / "SAMPLE-signing-key.asc"


def cli(*args: str | Path) -> int:
    return main([str(a) for a in args])


def ostree(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ostree", *map(str, args)], capture_output=True, text=True,
                          check=check)


def head(repo: Path, ref: str) -> str | None:
    proc = ostree(f"--repo={repo}", "rev-parse", ref, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def copy_build(source: Path, dest: Path) -> Path:
    """A private copy of a built release, so one test's compose never touches another's."""
    # gpg-agent sockets are not files; no agent may outlive a build anyway.
    shutil.copytree(source, dest, symlinks=True, ignore=shutil.ignore_patterns("S.gpg-agent*"))
    return dest


def bumped_release(dest_dir: Path, version: str = "4.14.3",
                   image_revisions: dict[str, int] | None = None) -> Path:
    """release.yaml with another version (what the next release of the fleet looks like),
    and new builds of the named images: IMAGE -> revision of its SAMPLE content, written as
    an OCI layout beside the file (an image index of every sample architecture, as release
    1's) and pinned by its new digest (`source: oci:PATH`)."""
    text = RELEASE.read_text()
    new, count = re.subn(r"^version: .*$", f"version: {version}", text, count=1, flags=re.M)
    assert count == 1
    dest_dir.mkdir(parents=True, exist_ok=True)
    images = {img.name: img for img in load_release(RELEASE).images()}
    for name, revision in (image_revisions or {}).items():
        image = images[name]
        layout = write_oci_layout(dest_dir / "images" / name, image.component, name, revision)
        new, count = re.subn(
            rf"(\n\s+{re.escape(name)}:\n\s+ref: )\S+(\n\s+source: )sample\b",
            rf"\g<1>{image.repository}@{layout.digest}\g<2>oci:images/{name}", new)
        assert count == 1, name
    path = dest_dir / "release.yaml"
    path.write_text(new)
    return path


def compose(build_dir: Path, release: Path = RELEASE, *extra: str) -> None:
    assert cli("--release", release, "blueprint", "--image", IMAGE, "--build-dir", build_dir) == 0
    assert cli("--release", release, "compose", "--image", IMAGE, "--build-dir", build_dir,
               *extra) == 0


def compose_pair(built: Path, work: Path) -> ComposedPair:
    build_dir = copy_build(built, work / "build")
    compose(build_dir)
    ref = _only_ref(build_dir / "ostree" / "repo")
    commit1 = head(build_dir / "ostree" / "repo", ref)
    # The next release: every package of the release bumped, and a new router image.
    release2 = bumped_release(work / "next", image_revisions={CHANGED_IMAGE: 1})
    assert cli("--release", release2, "rpms", "--no-lint", "--build-dir", build_dir) == 0
    compose(build_dir, release2)
    commit2 = head(build_dir / "ostree" / "repo", ref)
    assert commit1 and commit2 and commit1 != commit2
    assert cli("--release", release2, "deltas", "--image", IMAGE, "--build-dir", build_dir) == 0
    return ComposedPair(build_dir, RELEASE, release2, ref, commit1, commit2)


def _only_ref(repo: Path) -> str:
    refs = ostree(f"--repo={repo}", "refs").stdout.split()
    assert len(refs) == 1, refs
    return refs[0]


def compose_subprocess(build_dir: Path, env: dict[str, str] | None = None,
                       release: Path = RELEASE) -> subprocess.CompletedProcess[str]:
    """`python -m builder compose` in a child process (so it can be SIGKILLed)."""
    return subprocess.run(
        [sys.executable, "-m", "builder", "--release", str(release), "compose", "--image", IMAGE,
         "--build-dir", str(build_dir)],
        cwd=PROJECT_ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})},
        timeout=300, check=False)


def device_repo(path: Path, url: str, public_key: Path | None) -> Path:
    """A device's repository: bare mode as on /sysroot (archive repos cannot apply deltas)."""
    ostree(f"--repo={path}", "init", "--mode=bare")
    args = ([f"--gpg-import={public_key}", "--set=gpg-verify=true",
             "--set=gpg-verify-summary=true"] if public_key else ["--no-gpg-verify"])
    ostree(f"--repo={path}", "remote", "add", *args, "origin", url)
    return path


class _RecordingHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        self.server.requested.append(self.path)  # type: ignore[attr-defined]


@contextmanager
def serve(directory: Path) -> Iterator[tuple[str, list[str]]]:
    """Serve `directory` on 127.0.0.1; yield (url, list of requested paths)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0),
                                 partial(_RecordingHandler, directory=str(directory)))
    server.requested = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.requested  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
