"""The SBOM of a composed commit: valid SPDX 2.3 for the SPDX project's own validator,
complete against the lock file and the blueprint, and the same bytes for the same commit."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from builder.context import Context
from builder.publish.contents import CommitContents, InstalledPackage, StoredImage
from builder.publish.sbom import (
    SbomInputs,
    build_document,
    described_commit,
    oci_purl,
    rpm_purl,
    sbom_path,
)
from builder.release.model import load_release
from tests.support import requires
from tests.support.ostree import IMAGE, ComposedPair, cli, copy_build


def pyspdxtools(path: Path) -> subprocess.CompletedProcess[str]:
    tool = Path(sys.executable).parent / "pyspdxtools"
    return subprocess.run([str(tool), "-i", str(path)], capture_output=True, text=True,
                          check=False)


def package(name: str, license_: str = "MIT", vendor: str | None = None, epoch: int = 0,
            arch: str = "x86_64") -> InstalledPackage:
    return InstalledPackage(name, epoch, "1.2", "3.el9", arch, license_, vendor,
                            f"{name}-1.2-3.el9.src.rpm", None, None)


def contents(*packages: InstalledPackage, images: tuple[StoredImage, ...] = ()) -> CommitContents:
    return CommitContents("c" * 64, "4.14.2-1", 1700000000, packages, images, (),
                          "/usr/lib/sysimage/rpm")


def test_purls_follow_the_purl_spec() -> None:
    assert rpm_purl(package("libstdc++", vendor="Red Hat, Inc.", epoch=1)) == \
        "pkg:rpm/redhat/libstdc%2B%2B@1.2-3.el9?arch=x86_64&epoch=1"
    assert rpm_purl(package("microshift-core")) == "pkg:rpm/microshift-core@1.2-3.el9?arch=x86_64"
    image = StoredImage("quay.io/openshift/router", "sha256:" + "a" * 64, None, ())
    assert oci_purl(image) == (f"pkg:oci/router@sha256%3A{'a' * 64}"
                               "?repository_url=quay.io/openshift/router")


def test_licenses_that_are_not_spdx_expressions_become_license_refs(tmp_path: Path) -> None:
    """Fedora's legacy short names ("ASL 2.0") are no SPDX expression; SPDX ones stay."""
    pkgs = (package("a", "ASL 2.0"), package("b", "GPL-2.0-or-later AND MIT"),
            package("c", ""), package("d", "ASL 2.0"))
    document = build_document(SbomInputs("img", "ref/x", contents(*pkgs)))
    declared = {p["name"]: p.get("licenseDeclared") for p in document["packages"]}
    assert declared["b"] == "GPL-2.0-or-later AND MIT"
    assert declared["c"] == "NOASSERTION"
    assert declared["a"] == declared["d"] and declared["a"].startswith("LicenseRef-ASL-2.0-")
    [extracted] = document["hasExtractedLicensingInfos"]
    assert extracted["licenseId"] == declared["a"] and "ASL 2.0" in extracted["extractedText"]
    path = tmp_path / "doc.spdx.json"
    path.write_text(json.dumps(document))
    proc = pyspdxtools(path)
    assert proc.returncode == 0, proc.stderr


def test_the_spdx_validator_is_not_vacuous(tmp_path: Path) -> None:
    document = build_document(SbomInputs("img", "ref/x", contents(package("a"))))
    document["packages"][1]["licenseDeclared"] = "ASL 2.0"  # not an SPDX expression
    path = tmp_path / "bad.spdx.json"
    path.write_text(json.dumps(document))
    proc = pyspdxtools(path)
    assert proc.returncode != 0 and "ASL 2.0" in proc.stderr


def integration(test: Any) -> Any:
    """Runs on composed commits, which need root."""
    marked = requires.root_only("compose runs rpm --root and keeps ownership")(test)
    return pytest.mark.integration(marked)


@pytest.fixture(scope="module")
def sbom(composed_pair: ComposedPair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`python -m builder sbom` for release 2's commit, in a copy of the pair."""
    build = copy_build(composed_pair.build_dir, tmp_path_factory.mktemp("sbom") / "build")
    assert cli("--release", composed_pair.release2, "sbom", "--image", IMAGE,
               "--build-dir", build) == 0
    return sbom_path(Context(build, composed_pair.release2), IMAGE)


def _packages(document: dict[str, Any]) -> list[dict[str, Any]]:
    return list(document["packages"])


@integration
def test_sample_sbom_passes_the_spdx_validator(sbom: Path) -> None:
    proc = pyspdxtools(sbom)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(sbom.read_text())
    assert document["spdxVersion"] == "SPDX-2.3"
    assert document["creationInfo"]["created"] == "2023-11-14T22:13:20Z"  # source_date_epoch


@integration
def test_sbom_lists_every_locked_rpm_with_its_file_checksum(
        sbom: Path, composed_pair: ComposedPair) -> None:
    lock = json.loads((sbom.parent.parent / "blueprints" / f"{IMAGE}.x86_64.lock.json").read_text())
    document = json.loads(sbom.read_text())
    rpms = {(p["name"], p["versionInfo"]): p for p in _packages(document)
            if p["SPDXID"].startswith("SPDXRef-RPM-")}
    assert lock["packages"]
    for locked in lock["packages"]:
        entry = rpms[(locked["name"], f"{locked['version']}-{locked['release']}")]
        assert entry["checksums"] == [{"algorithm": "SHA256", "checksumValue": locked["sha256"]}]
        purl = entry["externalRefs"][0]["referenceLocator"]
        assert purl.startswith(f"pkg:rpm/{locked['name']}@") and f"arch={locked['arch']}" in purl
    core = rpms[("microshift-core", "4.14.3-1")]
    assert core["licenseDeclared"] == "Apache-2.0"
    # Every RPM of the commit's rpm database, also those only the base commit brought.
    installed = subprocess.run(
        ["rpm", "--root", "/", "--dbpath", str(_rpmdb(composed_pair, sbom.parent)), "-qa"],
        capture_output=True, text=True, check=True).stdout.split()
    assert len(rpms) == len(installed) > len(lock["packages"])
    relations = {(r["spdxElementId"], r["relationshipType"], r["relatedSpdxElement"])
                 for r in document["relationships"]}
    assert all(("SPDXRef-OSTree-commit", "CONTAINS", p["SPDXID"]) in relations
               for p in rpms.values())


def _rpmdb(pair: ComposedPair, scratch: Path) -> Path:
    dest = scratch / "rpmdb"
    dest.mkdir(exist_ok=True)
    raw = subprocess.run(["ostree", f"--repo={pair.repo}", "cat", pair.commit2,
                          "/usr/lib/sysimage/rpm/rpmdb.sqlite"], capture_output=True,
                         check=True).stdout
    (dest / "rpmdb.sqlite").write_bytes(raw)
    return dest


@integration
def test_sbom_lists_every_image_digest_of_the_blueprint_and_the_payload(
        sbom: Path, composed_pair: ComposedPair) -> None:
    blueprint = tomllib.loads((sbom.parent.parent / "blueprints" / f"{IMAGE}.toml").read_text())
    document = json.loads(sbom.read_text())
    images = {p["versionInfo"]: p for p in _packages(document)
              if p.get("primaryPackagePurpose") == "CONTAINER"}
    wanted = {c["source"].split("@", 1)[1]: c["source"].split("@", 1)[0]
              for c in blueprint["containers"]}
    assert set(images) == set(wanted)
    for digest, repository in wanted.items():
        assert images[digest]["name"] == repository
        assert images[digest]["checksums"][0]["checksumValue"] == digest.removeprefix("sha256:")
        assert images[digest]["externalRefs"][0]["referenceLocator"].startswith(
            f"pkg:oci/{repository.rsplit('/', 1)[1]}@sha256%3A{digest[7:]}")
    # Every file of the release's payload, with the sha256 of what the commit holds.
    files = load_release(composed_pair.release2).payload_for("x86_64")
    assert {"/usr/bin/microshift", "/usr/bin/microshift-etcd"} <= {f.install for f in files}
    payload = {p["comment"].split(",", 1)[0]: p for p in _packages(document)
               if p.get("primaryPackagePurpose") == "APPLICATION"}
    assert set(payload) == {f.install for f in files}
    for file in files:
        data = subprocess.run(["ostree", f"--repo={composed_pair.repo}", "cat",
                               composed_pair.commit2, file.install],
                              capture_output=True, check=True).stdout
        entry = payload[file.install]
        assert entry["checksums"][0]["checksumValue"] == hashlib.sha256(data).hexdigest()
        assert "installed by microshift-core" in entry["comment"]
        assert "SAMPLE" in entry["comment"]
    assert payload["/usr/bin/microshift"]["SPDXID"] == "SPDXRef-MicroShift-executable"
    assert described_commit(sbom) == (composed_pair.ref, composed_pair.commit2)


@integration
def test_same_commit_gives_the_same_sbom_bytes(sbom: Path, composed_pair: ComposedPair,
                                               tmp_path: Path) -> None:
    again = copy_build(composed_pair.build_dir, tmp_path / "again")
    assert cli("--release", composed_pair.release2, "sbom", "--image", IMAGE,
               "--build-dir", again) == 0
    assert sbom_path(Context(again, composed_pair.release2), IMAGE).read_bytes() == \
        sbom.read_bytes()
