"""How the SAMPLE bootc stand-in (builder/device/standins/bootc) turns an OCI layout into one
ostree commit, as ostree-rs-ext's import does: upper layers over lower ones, OCI whiteouts
(`.wh.NAME`, `.wh..wh..opq`) deleting what they name below them and never landing in the
tree, `/etc` as `/usr/etc`, empty layers leaving nothing behind, and a layer that an older
stand-in imported taken again. The release's own images never carry whiteouts (each layer
is a whole chunk of the tree); images built from a Containerfile (`RUN rm ...`) do.

Integration tier: the stand-in run for real on the real ostree (a bare repository: root)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from builder.baseos.debian import BOOTC_STANDIN
from tests.support import requires

pytestmark = [pytest.mark.integration,
              requires.root_only("a bare ostree repository keeps its files' owners")]

Entries = dict[str, bytes | None]    # path -> file content, or None for a directory


def layer(entries: Entries) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.mtime = 0
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def put(layout: Path, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs/sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def image(layout: Path, layers: list[Entries]) -> Path:
    """An OCI layout holding one image of `layers` (uncompressed: digest = diff_id)."""
    (layout / "blobs/sha256").mkdir(parents=True)
    blobs = [put(layout, layer(entries)) for entries in layers]
    config = put(layout, json.dumps({
        "architecture": "amd64", "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [b["digest"] for b in blobs]},
        "config": {"Labels": {"org.opencontainers.image.version": "4.14.2-1"}}}).encode())
    manifest = put(layout, json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **b}
                   for b in blobs]}).encode())
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", **manifest}]}))
    return layout


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A simulated device's root: its sysroot's repository, empty."""
    repo = tmp_path / "root/sysroot/ostree/repo"
    repo.parent.mkdir(parents=True)
    subprocess.run(["ostree", f"--repo={repo}", "init", "--mode=bare"], check=True)
    return tmp_path / "root"


def bootc(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["python3", str(BOOTC_STANDIN), *args], capture_output=True, text=True,
                          check=False, env={**os.environ, "MICROSHIFT_ROOT": str(root)})


def imported(root: Path, layout: Path) -> tuple[str, dict[str, str]]:
    """Import the layout; its commit and every path in it -> file content ('' for others)."""
    proc = bootc(root, "internals", "import", f"oci:{layout}")
    assert proc.returncode == 0, proc.stderr
    commit, digest = proc.stdout.split()
    repo = root / "sysroot/ostree/repo"
    listing = subprocess.run(["ostree", f"--repo={repo}", "ls", "-R", commit],
                             capture_output=True, text=True, check=True).stdout
    paths = {}
    for line in listing.splitlines():
        path = line.split()[-1]
        kind = line[0]
        paths[path] = subprocess.run(
            ["ostree", f"--repo={repo}", "cat", commit, path], capture_output=True,
            text=True, check=True).stdout if kind == "-" else ""
    meta = subprocess.run(["ostree", f"--repo={repo}", "show",
                           "--print-metadata-key=ostree.manifest-digest", commit],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert meta == f"'{digest}'"
    return commit, paths


BASE: Entries = {"etc/": None, "etc/hostname": b"edge\n", "usr/": None, "usr/bin/": None,
                 "usr/bin/tool": b"v1\n", "d/": None, "d/x": b"x\n", "d/y": b"y\n",
                 "o/": None, "o/keep": b"k\n", "gone": b"g\n"}


def test_whiteouts_delete_what_they_name_below_and_never_reach_the_tree(
        root: Path, tmp_path: Path) -> None:
    upper: Entries = {".wh.gone": b"", "d/": None, "d/.wh.x": b"", "o/": None,
                      "o/.wh..wh..opq": b"", "o/new": b"n\n", "etc/": None,
                      "etc/added": b"a\n", "usr/bin/tool": b"v2\n"}
    _, paths = imported(root, image(tmp_path / "layout", [BASE, upper]))
    files = {path: data for path, data in paths.items() if data}
    assert files == {"/usr/etc/hostname": "edge\n", "/usr/etc/added": "a\n",
                     "/usr/bin/tool": "v2\n", "/d/y": "y\n", "/o/new": "n\n"}
    assert not [p for p in paths if ".wh." in p or p == "/etc" or p.startswith("/etc/")]


def test_without_whiteouts_the_layers_merge_in_the_repository_upper_over_lower(
        root: Path, tmp_path: Path) -> None:
    upper: Entries = {"usr/bin/tool": b"v2\n", "d/": None, "d/z": b"z\n"}
    _, paths = imported(root, image(tmp_path / "layout", [BASE, {}, upper]))
    assert paths["/usr/bin/tool"] == "v2\n" and paths["/d/x"] == "x\n"
    assert paths["/d/z"] == "z\n" and paths["/gone"] == "g\n"
    assert paths["/usr/etc/hostname"] == "edge\n" and "/etc" not in paths
    assert not [p for p in paths if "empty-layer" in p]   # the empty layer left nothing


def test_a_layer_an_older_stand_in_imported_is_imported_again(
        root: Path, tmp_path: Path) -> None:
    """A layer commit without the kind this stand-in records (an older one's: its /etc
    not yet /usr/etc) is not merged as it is."""
    layout = tmp_path / "layout"
    image(layout, [BASE])
    config = json.loads(next(p for p in (layout / "blobs/sha256").iterdir()
                             if b'"diff_ids"' in p.read_bytes()).read_text())
    ref = "ostree/container/blob/" + config["rootfs"]["diff_ids"][0].replace(":", "_3A_")
    old = tmp_path / "old"
    (old / "etc").mkdir(parents=True)
    (old / "etc/hostname").write_text("stale\n")
    subprocess.run(["ostree", f"--repo={root / 'sysroot/ostree/repo'}", "commit",
                    f"--branch={ref}", f"--tree=dir={old}", "--no-xattrs"], check=True)
    _, paths = imported(root, layout)
    assert paths["/usr/etc/hostname"] == "edge\n" and paths["/usr/bin/tool"] == "v1\n"


def test_an_image_of_empty_layers_is_refused_in_one_line(root: Path, tmp_path: Path) -> None:
    image(tmp_path / "layout", [{}])
    proc = bootc(root, "internals", "import", f"oci:{tmp_path / 'layout'}")
    assert proc.returncode == 1
    assert proc.stderr == "error: the image has no files: every layer is empty\n"
