"""`disk --from-image`: which image a disk is installed from, and what the device's /etc
gets for it; then (as root, against Debian's docker-registry on loopback) a disk installed
from a signed image pulled from a registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builder.bootc.oci import CONFIG, INDEX, LAYER, MANIFEST, Layout
from builder.bootc.registry import POLICY_KEY
from builder.context import Context
from builder.core.errors import InputError
from builder.core.progress import Progress
from builder.disk.from_image import (
    ImageRequest,
    PullOptions,
    choose_image,
    device_reference,
    image_etc,
    parse_source,
)
from tests.support.cli import RELEASE

REF_NAME = "org.opencontainers.image.ref.name"


def _image(layout: Layout, arch: str, text: bytes) -> dict[str, object]:
    """An image of one layer whose config names `arch`; its index entry."""
    layer = layout.put(text)
    config = layout.put_json({"architecture": arch, "os": "linux",
                              "rootfs": {"type": "layers", "diff_ids": [layer.digest]}})
    manifest = layout.put_json({"schemaVersion": 2, "mediaType": MANIFEST,
                                "config": config.descriptor(CONFIG),
                                "layers": [layer.descriptor(LAYER)]})
    return manifest.descriptor(MANIFEST, platform={"architecture": arch, "os": "linux"},
                               annotations={REF_NAME: arch})


def _layout(root: Path, *arches: str) -> tuple[Layout, list[dict[str, object]]]:
    layout = Layout(root)
    layout.init()
    entries = [_image(layout, arch, arch.encode()) for arch in arches]
    layout.write_index(entries)
    return layout, entries


def _ctx(tmp_path: Path) -> Context:
    return Context(build_dir=tmp_path / "build", release_path=RELEASE, progress=Progress())


@pytest.mark.parametrize(("text", "words"), [
    ("ftp://quay.io/a/b", "'ftp://quay.io/a/b' is not an image source; allowed: nothing"),
    ("oci:", "'oci:' names no layout"),
    ("oci:/nonexistent/layout", "/nonexistent/layout is not an OCI image layout"),
    ("docker://quay.io", "'quay.io' is not a registry reference; allowed: HOST[:PORT]/"),
    ("docker://microshift-full:1", "'microshift-full:1' is not a registry reference"),
    ("docker://quay.io/a/B", "'quay.io/a/B' is not a registry reference"),
    ("docker://quay.io/a/b@sha256:12", "is not a registry reference"),
])
def test_a_bad_source_is_one_line_naming_the_option_and_what_is_allowed(
        text: str, words: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_source(text)
    assert caught.value.field == "--from-image" and words in caught.value.message
    assert "\n" not in caught.value.message


def test_the_sources_are_read_as_skopeo_names_them(tmp_path: Path) -> None:
    _layout(tmp_path / "my:layout", "amd64")
    assert parse_source("") == ImageRequest("build")
    assert parse_source(f"oci:{tmp_path}/my:layout") == \
        ImageRequest("oci", path=tmp_path / "my:layout")
    assert parse_source(f"oci:{tmp_path}/my:layout:v1") == \
        ImageRequest("oci", path=tmp_path / "my:layout", tag="v1")
    digest = "sha256:" + "a" * 64
    for reference in ("127.0.0.1:5000/microshift/x:4.14.2-1-x86_64", "quay.io/a/b",
                      f"localhost/a@{digest}", "registry.sample/ns/name:1"):
        assert parse_source(f"docker://{reference}") == ImageRequest("docker",
                                                                     reference=reference)


def test_an_oci_layout_gives_the_image_of_the_tag_or_of_the_architecture(
        tmp_path: Path) -> None:
    layout, (amd64, arm64) = _layout(tmp_path / "both", "amd64", "arm64")
    ctx = _ctx(tmp_path)
    request = ImageRequest("oci", path=layout.root)
    chosen = choose_image(ctx, request, "x", "aarch64", tmp_path / "w1", pulling=PullOptions())
    assert (chosen.manifest, chosen.commit) == (arm64["digest"], "")
    [entry] = json.loads((chosen.layout / "index.json").read_text())["manifests"]
    assert entry["digest"] == arm64["digest"]
    tagged = ImageRequest("oci", path=layout.root, tag="amd64")
    assert choose_image(ctx, tagged, "x", "x86_64", tmp_path / "w2",
                        pulling=PullOptions()).manifest == amd64["digest"]
    with pytest.raises(InputError, match="an image for amd64, not aarch64"):
        choose_image(ctx, tagged, "x", "aarch64", tmp_path / "w3", pulling=PullOptions())
    with pytest.raises(InputError, match="no image tagged 'v9'; allowed: amd64, arm64"):
        choose_image(ctx, ImageRequest("oci", path=layout.root, tag="v9"), "x", "x86_64",
                     tmp_path / "w4", pulling=PullOptions())
    # An index of images inside the layout (skopeo copy --all): its entry for the arch.
    index = layout.put_json({"schemaVersion": 2, "mediaType": INDEX,
                             "manifests": [amd64, arm64]})
    layout.write_index([index.descriptor(INDEX)])
    assert choose_image(ctx, request, "x", "x86_64", tmp_path / "w5",
                        pulling=PullOptions()).manifest == amd64["digest"]


def test_the_build_s_image_is_its_report_s_and_followed_where_it_was_pushed(
        tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    build = ImageRequest("build")
    with pytest.raises(InputError, match="no bootc image of microshift-full for x86_64"):
        choose_image(ctx, build, "microshift-full", "x86_64", tmp_path / "w",
                     pulling=PullOptions())
    _, (entry,) = _layout(ctx.layout.bootc_layout("microshift-full"), "amd64")
    entry["annotations"] = {REF_NAME: "x86_64"}
    Layout(ctx.layout.bootc_layout("microshift-full")).write_index([entry])
    report = ctx.layout.bootc_report("microshift-full", "x86_64")
    report.write_text(json.dumps({"manifest": entry["digest"], "commit": "c0ffee"}))
    chosen = choose_image(ctx, build, "microshift-full", "x86_64", tmp_path / "w",
                          pulling=PullOptions())
    assert (chosen.manifest, chosen.commit) == (entry["digest"], "c0ffee")
    with pytest.raises(InputError, match="--reference: is needed"):
        device_reference(ctx, build, None, "microshift-full", "x86_64")
    report.write_text(json.dumps({"manifest": entry["digest"], "pushed": {
        "reference": "quay.io/example/microshift-full", "digest": entry["digest"]}}))
    assert device_reference(ctx, build, None, "microshift-full", "x86_64") == \
        f"quay.io/example/microshift-full:{ctx.release.evr}-x86_64"
    assert device_reference(ctx, build, "quay.io/o/p:1", "microshift-full", "x86_64") == \
        "quay.io/o/p:1"
    pulled = ImageRequest("docker", reference="quay.io/a/b:2")
    assert device_reference(ctx, pulled, None, "x", "x86_64") == "quay.io/a/b:2"


def test_the_device_accepts_only_the_reference_s_repository_signed_by_the_key(
        tmp_path: Path) -> None:
    key = tmp_path / "release.asc"
    key.write_bytes(b"-----BEGIN PGP PUBLIC KEY BLOCK-----\nSAMPLE\n")
    files = image_etc("quay.io/example/microshift-full:4.14.2-1-x86_64", key,
                      "https://site.example/sigstore")
    policy = json.loads(files["containers/policy.json"])
    assert policy == {"default": [{"type": "reject"}], "transports": {"docker": {
        "quay.io/example/microshift-full": [
            {"type": "signedBy", "keyType": "GPGKeys", "keyPath": POLICY_KEY}]}}}
    assert files[POLICY_KEY.removeprefix("/etc/")] == key.read_bytes()
    assert json.loads(files["containers/registries.d/microshift.yaml"]) == {"docker": {
        "quay.io/example/microshift-full": {"lookaside": "https://site.example/sigstore"}}}
    assert "containers/registries.d/microshift.yaml" not in image_etc("quay.io/a/b", key, None)
