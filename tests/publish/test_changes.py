"""`diff FROM TO` and the deltas report's changes: packages added, removed and changed, images
changed by name with both digests, and the download of the update path."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from builder.core.errors import BuildError
from builder.core.ostree import Repo
from builder.core.runner import Runner
from builder.publish.changes import (
    ImageChange,
    PackageChange,
    changes_to,
    image_changes,
    package_changes,
)
from builder.publish.contents import (
    InstalledPackage,
    StoredImage,
    read_contents,
    split_reference,
)
from builder.publish.report import report_dir
from builder.release.model import load_release
from tests.support import requires
from tests.support.ostree import CHANGED_IMAGE, ComposedPair, cli


def pkg(name: str, version: str, arch: str = "x86_64", epoch: int = 0) -> InstalledPackage:
    return InstalledPackage(name, epoch, version, "1", arch, "MIT", None, None, None, None)


def image(repository: str, digest_char: str) -> StoredImage:
    return StoredImage(repository, "sha256:" + digest_char * 64, None, ())


def test_packages_added_removed_and_changed_by_name_and_arch() -> None:
    old = [pkg("bash", "5.1"), pkg("curl", "7.0"), pkg("kernel", "5.14.0"),
           pkg("glibc", "2.34", "i686"), pkg("gone", "1.0")]
    new = [pkg("bash", "5.1"), pkg("curl", "8.0", epoch=1), pkg("kernel", "5.14.0"),
           pkg("kernel", "5.14.1"), pkg("glibc", "2.34", "x86_64"), pkg("new", "2.0", "noarch")]
    assert package_changes(old, new) == (
        PackageChange("curl", "x86_64", "7.0-1", "1:8.0-1"),
        PackageChange("glibc", "i686", "2.34-1", None),
        PackageChange("glibc", "x86_64", None, "2.34-1"),
        PackageChange("gone", "x86_64", "1.0-1", None),
        # installonly packages: the set of installed versions is what changed
        PackageChange("kernel", "x86_64", "5.14.0-1", "5.14.0-1, 5.14.1-1"),
        PackageChange("new", "noarch", None, "2.0-1"),
    )


def test_images_changed_by_repository_with_old_and_new_digest() -> None:
    old = [image("quay.io/a/router", "1"), image("quay.io/a/dns", "2"), image("quay.io/a/x", "3")]
    new = [image("quay.io/a/router", "4"), image("quay.io/a/dns", "2"), image("quay.io/a/y", "5")]
    assert image_changes(old, new) == (
        ImageChange("quay.io/a/router", "sha256:" + "1" * 64, "sha256:" + "4" * 64),
        ImageChange("quay.io/a/x", "sha256:" + "3" * 64, None),
        ImageChange("quay.io/a/y", None, "sha256:" + "5" * 64),
    )


def test_a_new_manifest_list_with_the_same_image_for_this_architecture_is_no_change() -> None:
    def listed(list_char: str, stored_char: str) -> StoredImage:
        return StoredImage("quay.io/a/router", "sha256:" + list_char * 64, None, (),
                           "sha256:" + stored_char * 64)

    # The list was rebuilt for another architecture's sake; this one's image is the same.
    assert image_changes([listed("1", "a")], [listed("2", "a")]) == ()
    assert image_changes([listed("1", "a")], [listed("2", "b")]) == (
        ImageChange("quay.io/a/router", "sha256:" + "1" * 64, "sha256:" + "2" * 64),)


def test_stored_images_know_the_image_stored_for_the_architecture() -> None:
    from builder.publish.contents import stored_images

    record = {"id": "f" * 64, "digest": "sha256:" + "1" * 64,
              "names": ["quay.io/a/router@sha256:" + "1" * 64],
              "big-data-digests": {"manifest": "sha256:" + "a" * 64}}
    [stored] = stored_images(json.dumps([record]).encode(), "c" * 64)
    assert (stored.digest, stored.content) == ("sha256:" + "1" * 64, "sha256:" + "a" * 64)
    del record["big-data-digests"]
    [single] = stored_images(json.dumps([record]).encode(), "c" * 64)
    assert single.content == "sha256:" + "1" * 64


def test_image_names_lose_tag_and_digest_but_keep_a_registry_port() -> None:
    assert split_reference("registry:5000/ns/app:1.2@sha256:" + "a" * 64) == \
        ("registry:5000/ns/app", "1.2")
    assert split_reference("quay.io/ns/app@sha256:" + "a" * 64) == ("quay.io/ns/app", None)


def integration(test: Any) -> Any:
    marked = requires.root_only("compose runs rpm --root and keeps ownership")(test)
    return pytest.mark.integration(marked)


def expected_changes(pair: ComposedPair) -> dict[str, Any]:
    """What the pair's second release changed, from the inputs: every package this project
    builds went from 4.14.2-1 to 4.14.3-1, and one image got a new build."""
    lock_path = pair.build_dir / "blueprints" / "microshift-full.x86_64.lock.json"
    lock = json.loads(lock_path.read_text())
    ours = sorted((p["name"], p["arch"]) for p in lock["packages"]
                  if p["name"].startswith("microshift-"))
    old, new = ({img.name: img for img in load_release(path).images()}
                for path in (pair.release1, pair.release2))
    return {
        "packages": {"added": [], "removed": [],
                     "changed": [{"name": name, "arch": arch, "old": "4.14.2-1",
                                  "new": "4.14.3-1"} for name, arch in ours]},
        "images": {"added": [], "removed": [],
                   "changed": [{"name": old[CHANGED_IMAGE].repository,
                                "old": old[CHANGED_IMAGE].digest,
                                "new": new[CHANGED_IMAGE].digest}]},
    }


@integration
def test_diff_between_two_releases_names_the_changed_packages_and_images(
        composed_pair: ComposedPair, capsys: pytest.CaptureFixture[str]) -> None:
    pair = composed_pair
    assert cli("diff", "--build-dir", pair.build_dir, "--format", "json",
               pair.commit1[:12], pair.commit2) == 0
    report = json.loads(capsys.readouterr().out)
    wanted = expected_changes(pair)
    assert len(wanted["packages"]["changed"]) >= 4  # core, greenboot, ovnk, topolvm
    assert report["packages"] == wanted["packages"]
    assert report["images"] == wanted["images"]
    assert (report["from"], report["to"]) == ({"commit": pair.commit1, "version": "4.14.2-1"},
                                              {"commit": pair.commit2, "version": "4.14.3-1"})
    deltas = json.loads((report_dir(pair.build_dir, pair.ref) / "report.json").read_text())
    path = next(p for p in deltas["paths"] if p["from_commit"] == pair.commit1)
    assert report["update"]["delta_bytes"] == path["delta_bytes"] > 0
    assert report["update"]["object_pull_bytes"] == path["object_pull_bytes"]


@integration
def test_diff_text_takes_refs_and_shows_versions_and_digests(
        composed_pair: ComposedPair, capsys: pytest.CaptureFixture[str]) -> None:
    pair = composed_pair
    assert cli("diff", "--build-dir", pair.build_dir, f"{pair.ref}^", pair.ref) == 0
    text = capsys.readouterr().out
    changed = expected_changes(pair)["images"]["changed"][0]
    assert f"changed  {changed['name']}  {changed['old']} -> {changed['new']}" in text
    assert "microshift-core.x86_64" in text and "4.14.2-1 -> 4.14.3-1" in text
    assert "static delta" in text and "at 5 Mbit/s" in text


@integration
def test_diff_without_a_delta_reports_the_object_pull(
        composed_pair: ComposedPair, capsys: pytest.CaptureFixture[str]) -> None:
    pair = composed_pair  # no delta goes backwards, from release 2 to release 1
    assert cli("diff", "--build-dir", pair.build_dir, "--format", "json",
               pair.commit2, pair.commit1) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["update"]["delta_bytes"] is None
    assert 0 < report["update"]["object_pull_bytes"] < report["update"]["full_bytes"]
    assert report["images"]["changed"][0]["new"] == \
        expected_changes(pair)["images"]["changed"][0]["old"]


@integration
def test_diff_of_an_unknown_commit_names_the_refs(
        composed_pair: ComposedPair, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("diff", "--build-dir", composed_pair.build_dir, "0" * 12,
               composed_pair.ref) == 1
    err = capsys.readouterr().err
    assert "no commit '000000000000'" in err and composed_pair.ref in err
    assert "Traceback" not in err


@integration
def test_deltas_report_says_what_each_update_path_changes(composed_pair: ComposedPair) -> None:
    pair = composed_pair
    out = report_dir(pair.build_dir, pair.ref)
    report = json.loads((out / "report.json").read_text())
    [changes] = report["changes"]
    wanted = expected_changes(pair)
    assert changes["from"]["commit"] == pair.commit1 and changes["to"]["commit"] == pair.commit2
    assert (changes["packages"], changes["images"]) == (wanted["packages"], wanted["images"])
    text = (out / "report.txt").read_text()
    assert f"Changes from 4.14.2-1 ({pair.commit1[:12]}) to 4.14.3-1" in text
    assert wanted["images"]["changed"][0]["new"] in text



def commit_tree(repo: Path, files: dict[str, bytes]) -> str:
    tree = repo.parent / f"tree-{len(list(repo.parent.iterdir()))}"
    for rel, data in files.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(data)
    return subprocess.run(["ostree", f"--repo={repo}", "commit", "--orphan", f"--tree=dir={tree}",
                           "--timestamp=2023-11-14T22:13:20Z"], check=True, capture_output=True,
                          text=True).stdout.strip()


def test_unreadable_rpm_database_costs_the_report_its_changes_not_the_deltas(
        tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    subprocess.run(["ostree", f"--repo={repo}", "init", "--mode=archive"], check=True)
    bare = commit_tree(repo, {"usr/lib/os-release": b"ID=rhel\n"})
    broken = commit_tree(repo, {"usr/share/rpm/rpmdb.sqlite": b"not a database\n"})
    described = read_contents(Repo(repo, Runner()), bare)
    assert (described.rpmdb, described.packages, described.images) == (None, (), ())
    with pytest.raises(BuildError, match=rf"commit {broken[:12]}: rpm cannot read its rpm "
                                         "database /usr/share/rpm"):
        read_contents(Repo(repo, Runner()), broken)
    warnings: list[str] = []
    assert changes_to(Repo(repo, Runner()), broken, [bare], warnings.append) == ()
    assert len(warnings) == 1 and "rpm cannot read its rpm database" in warnings[0]
