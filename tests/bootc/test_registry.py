"""bootc images in a real registry (Debian's docker-registry on loopback, a storage
directory of the test's own, stopped after): pushed by digest, pulled back by digest with
skopeo and unpacked with umoci into the commit's tree; signed with the release key and
accepted under the device's policy, while an unsigned image, one signed by another key and
one re-tagged into another repository are refused; a re-push of an unchanged image sends no
layer; the SBOM is attached as an artifact referring to the image."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from builder.bootc.registry import (
    LocalRegistry,
    Pushed,
    device_policy,
    pull,
    push,
    registries_d,
)
from builder.bootc.tree import moved
from builder.core.errors import BuildError
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.core.signing import SigningKey, ensure_sample_key, stop_agent
from tests.bootc.conftest import ARCH
from tests.support import requires
from tests.support.cli import run_cli
from tests.support.ostree import IMAGE, ComposedPair, copy_build

pytestmark = [pytest.mark.integration,
              requires.root_only("the composed pair is composed as root")]


class Site:
    def __init__(self, registry: LocalRegistry, work: Path, layout: Path) -> None:
        self.registry = registry
        self.work = work
        self.layout = layout
        self.namespace = f"{registry.address}/microshift"
        self.signatures = work / "signatures"

    def push(self, name: str, key: SigningKey | None = None) -> Pushed:
        return push(Runner(), self.layout, ARCH, f"{self.namespace}/{name}:4.14.2-1-{ARCH}",
                    key=key, signatures=self.signatures if key else None, tls_verify=False)

    def pull(self, reference: str, key: Path, dest: str) -> str:
        policy = self.work / "policy.json"
        policy.write_text(json.dumps(device_policy(self.namespace, str(key))))
        registries = registries_d(self.work / "registries.d", self.namespace,
                                  lookaside=self.signatures.as_uri())
        return pull(Runner(), reference, self.work / dest, policy=policy,
                    registries=registries, tls_verify=False)


@pytest.fixture(scope="module")
def site(first: tuple[Path, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[Site]:
    build, _ = first
    work = tmp_path_factory.mktemp("registry")
    with LocalRegistry(work / "storage") as registry:
        yield Site(registry, work, build / "bootc" / IMAGE)
    assert not _listening(registry.address), "the registry outlived its test"


def _listening(address: str) -> bool:
    try:
        urllib.request.urlopen(f"http://{address}/v2/", timeout=2).close()
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def keys(first: tuple[Path, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[tuple[SigningKey, Path, SigningKey]]:
    """The release key (the build's SAMPLE key), its public half, and another key."""
    build, _ = first
    runner, progress = Runner(), Progress()
    release = ensure_sample_key(runner, progress, build / "gpg", 0)
    other = ensure_sample_key(runner, progress, tmp_path_factory.mktemp("other") / "gpg",
                              1_600_000_000)
    public = build / "gpg" / "SAMPLE-signing-key.asc"
    yield release, public, other
    for key in (release, other):
        stop_agent(runner, key.homedir)


def test_pushed_by_digest_and_pulled_back_it_unpacks_to_the_commits_tree(
        site: Site, first: tuple[Path, dict[str, Any]], composed_pair: ComposedPair,
        keys: tuple[SigningKey, Path, SigningKey], tmp_path: Path) -> None:
    build, report = first
    release, public, _ = keys
    before = site.registry.uploads()
    pushed = site.push(IMAGE, release)
    assert pushed.digest == report["manifest"]
    # Every layer and the config, once.
    assert site.registry.uploads() - before == len(report["layers"]) + 1
    assert site.pull(pushed.by_digest, public, "pulled") == report["manifest"]
    subprocess.run(["umoci", "unpack", "--image", f"{site.work / 'pulled'}:pulled",
                    str(tmp_path / "unpacked")], check=True, capture_output=True)
    checkout = tmp_path / "commit"
    subprocess.run(["ostree", f"--repo={build / 'ostree/repo'}", "checkout", "-U",
                    composed_pair.commit1, str(checkout)], check=True)
    assert _tree(tmp_path / "unpacked/rootfs", moved_paths=False) == _tree(checkout)


def _tree(root: Path, *, moved_paths: bool = True) -> dict[str, tuple[str, int, str]]:
    """Path -> (kind, permission bits, sha256 or link target), /var and what bootc adds left
    out; the commit's paths where the image has them."""
    found = {}
    for path in root.rglob("*"):
        rel = path.relative_to(root).as_posix()
        if rel == "var" or rel.startswith(("var/", "sysroot", "usr/lib/bootc",
                                           "usr/lib/ostree")) or rel in (
                "ostree", "tmp", "usr/lib/containers"):
            continue
        info = path.lstat()
        kind = "l" if stat.S_ISLNK(info.st_mode) else "d" if path.is_dir() else "-"
        body = os.readlink(path) if kind == "l" else \
            hashlib.sha256(path.read_bytes()).hexdigest() if kind == "-" else ""
        key = moved(rel) if moved_paths else rel
        if key == "etc/containers/storage.conf":
            continue  # names the moved store: the proof checks it with the rewrite
        found[key] = (kind, stat.S_IMODE(info.st_mode), body)
    return found


def test_a_signed_image_is_accepted_and_the_others_are_refused(
        site: Site, keys: tuple[SigningKey, Path, SigningKey]) -> None:
    release, public, other = keys
    signed = site.push(IMAGE, release)
    assert site.pull(signed.by_digest, public, "accepted")
    unsigned = site.push("unsigned")
    with pytest.raises(BuildError, match="A signature was required, but no signature exists"):
        site.pull(unsigned.by_digest, public, "unsigned")
    foreign = site.push("foreign", other)
    with pytest.raises(BuildError, match="refused"):
        site.pull(foreign.by_digest, public, "foreign")
    # The same manifest re-tagged into another repository, its signature copied beside it:
    # the signature names the repository it was made for.
    retagged = site.push("retagged")
    made_for = site.signatures / "microshift" / f"{IMAGE}@{signed.digest.replace(':', '=')}"
    shutil.copytree(made_for, site.signatures / "microshift" /
                    f"retagged@{retagged.digest.replace(':', '=')}", dirs_exist_ok=True)
    with pytest.raises(BuildError, match="refused"):
        site.pull(retagged.by_digest, public, "retagged")


def test_an_unchanged_image_pushed_again_uploads_no_layer(
        site: Site, keys: tuple[SigningKey, Path, SigningKey]) -> None:
    site.push("again", keys[0])
    before = site.registry.uploads()
    site.push("again", keys[0])
    assert site.registry.uploads() == before  # every blob was there: none sent again


def test_the_sbom_is_attached_under_the_tag_schema(
        site: Site, first: tuple[Path, dict[str, Any]], composed_pair: ComposedPair) -> None:
    from builder.bootc.oci import MANIFEST
    from builder.bootc.registry import attach_sbom

    build, report = first
    assert run_cli("--release", composed_pair.release1, "sbom", "--build-dir", build,
                   "--image", IMAGE) == 0
    sbom = (build / "sbom" / f"{IMAGE}.spdx.json")
    size = (build / "bootc" / IMAGE / "blobs/sha256" /
            report["manifest"].removeprefix("sha256:")).stat().st_size
    subject = {"mediaType": MANIFEST, "digest": report["manifest"], "size": size}
    tag = attach_sbom(site.registry.address, f"microshift/{IMAGE}", subject,
                      sbom.read_bytes(), https=False)
    assert tag == "sha256-" + report["manifest"].removeprefix("sha256:")
    request = urllib.request.Request(
        f"http://{site.namespace.split('/')[0]}/v2/microshift/{IMAGE}/manifests/{tag}",
        headers={"Accept": MANIFEST})
    with urllib.request.urlopen(request, timeout=10) as answer:
        artifact = json.loads(answer.read())
    assert artifact["subject"]["digest"] == report["manifest"]
    assert artifact["artifactType"] == "application/spdx+json"


def test_the_bootc_command_pushes_signs_and_writes_the_device_files(
        site: Site, first: tuple[Path, dict[str, Any]], composed_pair: ComposedPair,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`bootc --push` as a release engineer types it: the image by digest, signed with the
    release key into the lookaside directory, and what a device ships to enforce it."""
    build, report = first
    copy = copy_build(build, tmp_path / "build")
    assert run_cli("--release", composed_pair.release1, "bootc", "--build-dir", copy,
                   "--image", IMAGE, "--push", site.namespace, "--no-tls-verify") == 0
    out = capsys.readouterr().out
    assert f"{IMAGE} {ARCH} pushed {site.namespace}/{IMAGE}@{report['manifest']}" in out
    assert list((copy / "bootc/signatures").rglob("signature-1"))
    # The report says where it went: `publish` names it in the image-mode devices' index.
    recorded = json.loads((copy / f"bootc/{IMAGE}.{ARCH}.json").read_text())["pushed"]
    assert recorded == {"reference": f"{site.namespace}/{IMAGE}",
                        "digest": report["manifest"]}
    device = copy / "bootc/device"
    policy = json.loads((device / "policy.json").read_text())
    [rule] = policy["transports"]["docker"][site.namespace]
    assert rule["type"] == "signedBy" and policy["default"] == [{"type": "reject"}]
    assert (device / Path(rule["keyPath"]).name).read_text().startswith(
        "-----BEGIN PGP PUBLIC KEY BLOCK-----")


def test_a_registry_that_is_not_there_is_one_line(
        first: tuple[Path, dict[str, Any]], composed_pair: ComposedPair, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    build, _ = first
    copy = copy_build(build, tmp_path / "build")
    assert run_cli("--release", composed_pair.release1, "bootc", "--build-dir", copy,
                   "--image", IMAGE, "--push", "127.0.0.1:9/microshift",
                   "--no-tls-verify") == 1
    errors = [line for line in capsys.readouterr().err.splitlines()
              if line.startswith("error: ")]
    assert len(errors) == 1 and "127.0.0.1:9" in errors[0], errors
