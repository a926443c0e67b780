"""`disk --from-image`: which image a disk is installed from, and what the device's /etc
gets for it; then (as root, against Debian's docker-registry on loopback) a disk installed
from a signed image pulled from a registry."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from builder.baseos.debian import BOOTC_STANDIN
from builder.bootc.oci import CONFIG, INDEX, LAYER, MANIFEST, Layout
from builder.bootc.registry import (
    POLICY_KEY,
    LocalRegistry,
    device_policy,
    pull,
    push,
    registries_d,
)
from builder.bootc.sample_images import single_image
from builder.context import Context
from builder.core.errors import BuildError, InputError
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.core.signing import SAMPLE_PUBLIC_KEY, SigningKey, ensure_sample_key, stop_agent
from builder.disk.from_image import (
    ImageRequest,
    PullOptions,
    choose_image,
    device_reference,
    image_etc,
    parse_source,
)
from builder.disk.image import BOOT_SIZE, FIRST_SECTOR
from tests.disk.test_image import EPOCH, small_commit
from tests.support import requires
from tests.support.cli import RELEASE, run_cli

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


def _dump(partition: str, paths: list[str], dest: Path) -> None:
    """Directories of a file system inside a disk image, copied out (debugfs: no mount)."""
    dest.mkdir(parents=True, exist_ok=True)
    for path in paths:
        subprocess.run(["debugfs", "-R", f"rdump {path} {dest}", partition],
                       capture_output=True, check=True)


@pytest.mark.integration
@requires.root_only("the deployed files keep their owners")
def test_a_disk_from_a_signed_registry_image_boots_it_and_takes_only_signed_ones(
        tmp_path: Path) -> None:
    """The image pushed signed to a registry, pulled under a policy by `disk --from-image
    docker://...`: the deployment is its import, named by its reference, `bootc status`
    shows its digest booted, and the disk's own policy accepts the release key's signed
    image of that repository only."""
    repo, commit = small_commit(tmp_path)
    build = tmp_path / "build"
    runner, progress = Runner(), Progress()
    release = ensure_sample_key(runner, progress, build / "gpg", EPOCH)
    public = build / "gpg" / SAMPLE_PUBLIC_KEY
    other = ensure_sample_key(runner, progress, tmp_path / "other-gpg", EPOCH + 1)
    # Three images of the commit (versions 1 to 3: three digests), each as push reads one.
    layouts = []
    for version in "123":
        single_image(_ctx(tmp_path / "img"), repo.path, commit, version, tmp_path / version)
        layout = Layout(tmp_path / version / "image")
        [entry] = layout.index()["manifests"]
        layout.write_index([{**entry, "annotations": {REF_NAME: "x86_64"}}])
        layouts.append(layout)
    digest = layouts[0].index()["manifests"][0]["digest"]
    signatures = tmp_path / "signatures"
    try:
        with LocalRegistry(tmp_path / "storage") as registry:
            namespace = f"{registry.address}/microshift"

            def put(number: int, name: str, key: SigningKey | None) -> str:
                return push(runner, layouts[number].root, "x86_64", f"{namespace}/{name}",
                            key=key, signatures=signatures if key else None,
                            tls_verify=False).reference

            signed, unsigned = put(0, "disk-test:1", release), put(1, "disk-test:2", None)
            foreign, elsewhere = put(2, "disk-test:3", other), put(0, "other:1", release)
            policy = tmp_path / "pull-policy.json"
            policy.write_text(json.dumps(device_policy(namespace, str(public))))
            lookaside = signatures.as_uri()
            registries = registries_d(tmp_path / "registries.d", namespace, lookaside=lookaside)
            argv = ["--release", RELEASE, "--arch", "x86_64", "disk", "--build-dir", build,
                    "--image", "microshift-minimal", "--firmware", "bios", "--no-qcow2",
                    "--policy", policy, "--registries-d", registries, "--no-tls-verify",
                    "--lookaside", lookaside, "--from-image"]
            # An unsigned image is refused by the pull's policy: one line, no disk.
            assert run_cli(*argv, f"docker://{unsigned}") == 1
            assert [p.name for p in (build / "disk").glob("*")] == []
            assert run_cli(*argv, f"docker://{signed}") == 0
            raw = build / "disk/microshift-minimal.x86_64.bios.image.raw"
            record = json.loads(raw.with_suffix(".json").read_text())
            assert record["image"] == {"reference": signed, "manifest": digest}
            root = tmp_path / "root"
            deployed = _deployed(raw, root / "sysroot")
            assert f"ostree-image-signed:docker://{signed}" in \
                deployed.with_name(deployed.name + ".origin").read_text()
            status = json.loads(subprocess.run(
                ["python3", str(BOOTC_STANDIN), "status", "--json"], capture_output=True,
                text=True, check=True, env={**os.environ, "MICROSHIFT_ROOT": str(root)}).stdout)
            booted = status["status"]["booted"]
            assert booted["image"]["imageDigest"] == digest
            assert booted["image"]["image"] == {"image": signed, "transport": "registry"}
            assert booted["ostree"]["checksum"] == deployed.name.split(".")[0]
            # The device's policy, its key where the disk has it: the release key's
            # signature of that repository only.
            etc = deployed / "etc"
            device = json.loads((etc / "containers/policy.json").read_text())
            [rule] = device["transports"]["docker"][signed.rsplit(":", 1)[0]]
            rule["keyPath"] = str(etc / POLICY_KEY.removeprefix("/etc/"))
            (tmp_path / "device-policy.json").write_text(json.dumps(device))
            device_registries = etc / "containers/registries.d"
            assert json.loads((device_registries / "microshift.yaml").read_text())[
                "docker"][signed.rsplit(":", 1)[0]] == {"lookaside": lookaside}
            assert pull(runner, signed, tmp_path / "ok", policy=tmp_path / "device-policy.json",
                        registries=registries, tls_verify=False) == digest
            for refused in (unsigned, foreign, elsewhere):
                with pytest.raises(BuildError, match="refused"):
                    pull(runner, refused, tmp_path / "no", registries=registries,
                         policy=tmp_path / "device-policy.json", tls_verify=False)
    finally:
        for key in (release, other):
            stop_agent(runner, key.homedir)


def _deployed(raw: Path, sysroot: Path) -> Path:
    """The disk's sysroot as the stand-in reads one (MICROSHIFT_ROOT: /sysroot and the
    kernel command line of the boot entry); the deployment's directory."""
    boot = f"{raw}?offset={FIRST_SECTOR * 512}"
    _dump(f"{raw}?offset={FIRST_SECTOR * 512 + BOOT_SIZE}", ["/ostree"], sysroot)
    _dump(boot, ["/loader", "/loader.1"], sysroot / "boot")
    [entry] = (sysroot / "boot/loader/entries").glob("*.conf")
    options = next(line for line in entry.read_text().splitlines()
                   if line.startswith("options "))
    (sysroot.parent / "proc").mkdir()
    (sysroot.parent / "proc/cmdline").write_text(options.removeprefix("options ") + "\n")
    link = next(word for word in options.split() if word.startswith("ostree="))
    return (sysroot / link.removeprefix("ostree=").lstrip("/")).resolve()
