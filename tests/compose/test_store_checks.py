"""The embedded image cache's checks on a store laid out by hand as containers/storage lays
it out (overlay-images/images.json, each image's big data under its file name): every way
the store can fail a device that boots offline is one clear error naming the image. The
stores skopeo writes are tested in tests/compose/test_containers.py."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from builder.compose.containers import EmbeddedImage, _big_data, verify_store
from builder.core.errors import BuildError
from builder.sources.platforms import digest_of

NAME = "quay.io/microshift-sample/pause@sha256:" + "1" * 64
LIST = "sha256:" + "1" * 64


def config(arch: str | None = "arm64") -> bytes:
    return json.dumps({"architecture": arch, "os": "linux"} if arch else {"os": "linux"},
                      sort_keys=True).encode()


def manifest(config_blob: bytes | None) -> bytes:
    document: dict[str, Any] = {"schemaVersion": 2, "layers": []}
    if config_blob is not None:
        document["config"] = {"digest": digest_of(config_blob), "size": len(config_blob)}
    return json.dumps(document, sort_keys=True).encode()


def file_name(key: str) -> str:
    """containers/storage's makeBigDataBaseName: kept when only '.', 0-9 and a-z."""
    if all(c == "." or c.isdigit() or "a" <= c <= "z" for c in key):
        return key
    return "=" + base64.b64encode(key.encode()).decode()


def store(tmp_path: Path, *, config_blob: bytes | None = None, config_key: str | None = None,
          manifest_blob: bytes | None = None, record: dict[str, Any] | None = None,
          ) -> tuple[Path, EmbeddedImage]:
    root = tmp_path / "store"
    blob = config() if config_blob is None else config_blob
    stored_manifest = manifest(blob) if manifest_blob is None else manifest_blob
    instance = digest_of(stored_manifest)
    base = {"id": "abc", "names": [NAME], "digest": LIST,
            "big-data-digests": {f"manifest-{LIST}": LIST, "manifest": instance}}
    entry = {**base, **(record or {})}
    images = root / "overlay-images"
    (images / "abc").mkdir(parents=True)
    (images / "images.json").write_text(json.dumps([entry]))
    (images / "abc" / "manifest").write_bytes(stored_manifest)
    key = config_key or digest_of(blob)
    (images / "abc" / file_name(key)).write_bytes(blob)
    return root, EmbeddedImage(NAME, LIST, "oci:/layout", "aarch64", instance)


def refused(root: Path, image: EmbeddedImage) -> str:
    with pytest.raises(BuildError) as caught:
        verify_store(root, [image])
    return str(caught.value)


def test_a_store_as_containers_storage_writes_it_passes(tmp_path: Path) -> None:
    root, image = store(tmp_path)
    verify_store(root, [image])


def test_a_store_without_a_readable_image_list_is_refused(tmp_path: Path) -> None:
    root, image = store(tmp_path)
    (root / "overlay-images" / "images.json").write_text("[{")
    assert refused(root, image).startswith(f"{root}: no readable overlay-images/images.json: ")


def test_an_image_missing_from_the_store_is_refused_by_name(tmp_path: Path) -> None:
    root, image = store(tmp_path, record={"names": ["quay.io/other/image:latest"]})
    assert refused(root, image) == f"{NAME} is missing from the embedded store {root}"
    root, image = store(tmp_path / "nameless", record={"names": None})
    del_names = json.loads((root / "overlay-images/images.json").read_text())
    del del_names[0]["names"]
    (root / "overlay-images/images.json").write_text(json.dumps(del_names))
    assert refused(root, image) == f"{NAME} is missing from the embedded store {root}"


def test_a_record_without_digests_is_refused_naming_both(tmp_path: Path) -> None:
    root, image = store(tmp_path)
    records = json.loads((root / "overlay-images/images.json").read_text())
    del records[0]["big-data-digests"]
    (root / "overlay-images/images.json").write_text(json.dumps(records))
    assert refused(root, image) == (f"{NAME}: stored with digest {LIST}, expected {LIST} "
                                    "(copied from oci:/layout)")


def test_a_stored_image_of_another_architecture_says_what_to_do(tmp_path: Path) -> None:
    root, image = store(tmp_path)
    other = EmbeddedImage(NAME, LIST, "oci:/layout", "aarch64", "sha256:" + "9" * 64)
    with pytest.raises(BuildError) as caught:
        verify_store(root, [other])
    assert caught.value.message.startswith(f"{NAME}: the store holds image "
                                           f"{image.instance_digest} for aarch64")
    assert caught.value.hint == ("skopeo chose another image of the manifest list; compose "
                                 "again, and report it if it persists")


def test_a_missing_manifest_file_is_refused_naming_the_file(tmp_path: Path) -> None:
    root, image = store(tmp_path)
    (root / "overlay-images/abc/manifest").unlink()
    assert refused(root, image) == (f"['{NAME}']: the store lacks its manifest "
                                    f"({root / 'overlay-images/abc/manifest'})")


def test_a_manifest_naming_no_config_is_refused(tmp_path: Path) -> None:
    root, image = store(tmp_path, manifest_blob=manifest(None))
    assert refused(root, image) == f"{NAME}: its stored manifest names no config"


@pytest.mark.parametrize(("blob", "says"), [(config("amd64"), "amd64"),
                                            (config(None), "no architecture")])
def test_a_config_of_another_architecture_is_refused(tmp_path: Path, blob: bytes,
                                                     says: str) -> None:
    root, image = store(tmp_path, config_blob=blob)
    assert refused(root, image) == (f"{NAME}: the stored image's config says {says}, not "
                                    "arm64 (aarch64)")


def test_a_config_whose_bytes_are_not_the_ones_its_manifest_names_is_refused(
        tmp_path: Path) -> None:
    """The right architecture, but another config than the manifest's (its digest
    differs): what CRI-O would run is not the image that was resolved."""
    named = config("arm64")
    root, image = store(tmp_path, config_blob=named)
    other = json.dumps({"architecture": "arm64", "os": "linux", "x": 1}).encode()
    (root / "overlay-images/abc" / file_name(digest_of(named))).write_bytes(other)
    assert refused(root, image) == (f"{NAME}: the store's config {digest_of(named)} holds "
                                    f"other bytes (their digest is {digest_of(other)})")


@pytest.mark.parametrize(("key", "name"), [
    ("manifest", "manifest"),
    ("0.9az", "0.9az"),
    ("a/", "=" + base64.b64encode(b"a/").decode()),
    ("A", "=" + base64.b64encode(b"A").decode()),
    ("{", "=" + base64.b64encode(b"{").decode()),
    ("sha256:" + "0" * 64, "=" + base64.b64encode(("sha256:" + "0" * 64).encode()).decode()),
])
def test_big_data_is_read_under_the_name_containers_storage_gives_it(
        tmp_path: Path, key: str, name: str) -> None:
    directory = tmp_path / "overlay-images" / "abc"
    directory.mkdir(parents=True)
    (directory / name).write_bytes(b"data")
    assert _big_data(tmp_path, {"id": "abc", "names": [NAME]}, key) == b"data"
