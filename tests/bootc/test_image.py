"""bootc images of the composed pair's commits (issue 40): the same digest from two clean
builds; bootc's fatal lints pass; the equality proof holds and catches a planted
difference; the next release, planned from the first's layer plan, changes exactly the
layers whose content changed. Integration tier: real ostree commits, skopeo and umoci."""

from __future__ import annotations

import hashlib
import json
import subprocess
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from builder.bootc.containerfile import check_bib_config
from builder.bootc.image import BootcOptions, image_tree
from builder.bootc.image_delta import apply_image_delta, unpack_image
from builder.bootc.layers import group_of
from builder.bootc.oci import Layout
from builder.bootc.proof import prove
from builder.bootc.tardiff import BadDelta
from builder.bootc.tree import CommitTree, moved
from builder.core.errors import BuildError
from builder.core.ostree import Repo
from builder.core.progress import human_bytes
from builder.core.runner import Runner
from builder.publish.contents import package_files
from tests.bootc.conftest import ARCH, bootc_build
from tests.support import requires
from tests.support.cli import run_cli
from tests.support.ostree import IMAGE, ComposedPair, copy_build

pytestmark = [pytest.mark.integration,
              requires.root_only("the composed pair is composed as root")]


def test_two_clean_builds_give_the_same_image(composed_pair: ComposedPair,
                                              first: tuple[Path, dict[str, Any]],
                                              tmp_path: Path) -> None:
    build, report = first
    again = copy_build(composed_pair.build_dir, tmp_path / "again")
    second = bootc_build(composed_pair, again, composed_pair.commit1, composed_pair.release1)
    assert second["manifest"] == report["manifest"]
    assert 2 <= len(report["layers"]) <= 64
    assert report["commit"] == composed_pair.commit1 and report["proof"]["paths"] > 300
    inspected = json.loads(subprocess.run(
        ["skopeo", "inspect", f"oci:{build / 'bootc' / IMAGE}:{ARCH}"], check=True,
        capture_output=True, text=True).stdout)
    assert inspected["Digest"] == report["manifest"]
    labels = inspected["Labels"]
    assert (labels["containers.bootc"], labels["ostree.bootable"]) == ("1", "1")
    assert labels["org.opencontainers.image.version"] == "4.14.2-1"
    assert labels["ostree.commit"] == composed_pair.commit1


def test_the_image_is_laid_out_as_bootc_wants_it(first: tuple[Path, dict[str, Any]],
                                                 tmp_path: Path) -> None:
    """umoci unpacks it; /etc at the root and no /usr/etc, the kernel under
    /usr/lib/modules, the image store under /usr/lib/containers, /sysroot and /ostree."""
    build, _ = first
    subprocess.run(["umoci", "unpack", "--image", f"{build / 'bootc' / IMAGE}:{ARCH}",
                    str(tmp_path / "unpacked")], check=True, capture_output=True)
    root = tmp_path / "unpacked" / "rootfs"
    assert (root / "etc/microshift/config.yaml").is_file() and not (root / "usr/etc").exists()
    assert list((root / "usr/lib/modules").glob("*/vmlinuz"))
    assert (root / "usr/lib/containers/storage/overlay-images/images.json").is_file()
    assert not (root / "usr/share/containers/storage").exists()
    assert "/usr/lib/containers/storage" in (root / "etc/containers/storage.conf").read_text()
    assert (root / "sysroot").is_dir() and (root / "ostree").readlink() == Path("sysroot/ostree")
    assert 'type = "xfs"' in (root / "usr/lib/bootc/install/00-microshift-rootfs.toml").read_text()
    assert (root / "tmp").is_dir() and not (root / "tmp").is_symlink()


def test_a_planted_difference_fails_the_proof(composed_pair: ComposedPair,
                                             first: tuple[Path, dict[str, Any]]) -> None:
    """A layer rewritten with one file's mode changed, the manifest naming it instead."""
    build, report = first
    layout = Layout(build / "bootc" / IMAGE)
    tree = CommitTree(build / "ostree/repo", composed_pair.commit1, Runner())
    commit_nodes = tree.nodes()
    owners = {moved(p): n for p, n in package_files(Repo(build / "ostree/repo", Runner()),
                                                   composed_pair.commit1).items()}
    image_nodes = image_tree(commit_nodes, tree, BootcOptions())
    victim = next(n for n in image_nodes if n.path == "usr/bin/microshift")
    group = group_of(victim, owners)
    layer = next(item for item in report["layers"] if group in item["groups"])
    members = [replace(n, mode=0o777) if n is victim else n for n in image_nodes
               if group_of(n, owners) in layer["groups"]]
    blob = layout.write_layer(members, lambda n: tree.read(n.checksum))
    manifest = layout.read_json(report["manifest"])
    manifest["layers"] = [blob.descriptor(item["mediaType"]) if item["digest"] ==
                          layer["digest"] else item for item in manifest["layers"]]
    planted = layout.put_json(manifest)
    with pytest.raises(BuildError) as caught:
        prove(layout, planted.digest, commit_nodes, tree, image_nodes)
    assert "/usr/bin/microshift: mode 0755 in the commit, 0777 in the image" in str(caught.value)
    prove(layout, report["manifest"], commit_nodes, tree, image_nodes)  # the real one holds


def test_the_next_release_changes_only_the_layers_whose_content_changed(
        composed_pair: ComposedPair, first: tuple[Path, dict[str, Any]],
        tmp_path: Path) -> None:
    """Planned from the first release's plan: a group keeps its layer, and a layer's digest
    changes exactly when what it holds (paths, metadata, content) changed."""
    build, report1 = first
    next_build = copy_build(build, tmp_path / "next")
    report2 = bootc_build(composed_pair, next_build, composed_pair.commit2,
                          composed_pair.release2)
    plan1 = json.loads((build / f"bootc/{IMAGE}.{ARCH}.plan.json").read_text())["assignment"]
    plan2 = json.loads((next_build / f"bootc/{IMAGE}.{ARCH}.plan.json").read_text())
    kept = {g: i for g, i in plan1.items() if g in plan2["assignment"]}
    assert all(plan2["assignment"][g] == i for g, i in kept.items())
    content1 = _content_by_group(build, composed_pair.commit1)
    content2 = _content_by_group(next_build, composed_pair.commit2)
    digests1 = {layer["index"]: layer["digest"] for layer in report1["layers"]}
    unchanged = changed = 0
    for layer in report2["layers"]:
        same = all(content1.get(g) == content2.get(g) for g in layer["groups"]) and \
            layer["index"] in digests1 and layer["groups"] == next(
                (item["groups"] for item in report1["layers"]
                 if item["index"] == layer["index"]), None)
        assert (digests1.get(layer["index"]) == layer["digest"]) == same, layer["groups"]
        unchanged, changed = unchanged + same, changed + (not same)
    assert unchanged > 0 and changed > 0   # images other than the router's kept their layers
    update = report2["update"]
    assert update["from_manifest"] == report1["manifest"]
    assert update["changed_layers"] == changed
    assert update["pull_bytes"] == sum(layer["size"] for layer in report2["layers"]
                                       if layer["digest"] not in digests1.values())
    assert update["pull_bytes"] < update["single_layer_bytes"]
    assert sorted(update["changed"]) == sorted(
        layer["index"] for layer in report2["layers"] if layer["digest"] not in digests1.values())
    _the_delta_rebuilds_the_changed_layers(next_build, report1, report2, tmp_path)
    _the_update_report_shows_image_mode(composed_pair, next_build, update)


def _the_delta_rebuilds_the_changed_layers(build: Path, report1: dict[str, Any],
                                           report2: dict[str, Any], tmp_path: Path) -> None:
    """A device that runs the first image rebuilds every changed layer of the next from the
    oci-delta layout and its own files, each to the diff_id the image's config names, from
    fewer bytes than the changed layers; a device whose files differ is refused."""
    delta = report2["update"]["delta"]
    assert (delta["from_manifest"], delta["to_manifest"]) == (report1["manifest"],
                                                              report2["manifest"])
    had = {layer["digest"] for layer in report1["layers"]}
    changed = [layer for layer in report2["layers"] if layer["digest"] not in had]
    assert [layer["to"] for layer in delta["layers"]] == [layer["digest"] for layer in changed]
    assert delta["reused_layers"] == len(report2["layers"]) - len(changed)
    assert delta["bytes"] < report2["update"]["pull_bytes"]
    device = tmp_path / "device"
    unpack_image(Layout(build / f"bootc/{IMAGE}"), report1["manifest"], device)
    dest = build / f"bootc/{IMAGE}.{ARCH}.delta"
    rebuilt = apply_image_delta(dest, device, tmp_path / "layers", Runner(),
                                expected_manifest=report2["manifest"])
    assert rebuilt == {layer["diff_id"]: layer["digest"] for layer in changed}
    for diff_id in rebuilt:
        data = (tmp_path / "layers" / diff_id.removeprefix("sha256:")).read_bytes()
        assert "sha256:" + hashlib.sha256(data).hexdigest() == diff_id
    diffed = [layer for layer in delta["layers"] if layer["sent"] == "tar-diff"]
    assert diffed, delta["layers"]
    for path in sorted(device.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.stat().st_size > 64:
            path.write_bytes(path.read_bytes()[::-1])
    with pytest.raises(BadDelta, match="rebuilds a layer with diff_id"):
        apply_image_delta(dest, device, tmp_path / "again", Runner())


def _the_update_report_shows_image_mode(pair: ComposedPair, build: Path,
                                        update: dict[str, Any]) -> None:
    """The deltas stage's report sets the image-mode pull beside the static delta."""
    assert run_cli("--release", pair.release2, "deltas", "--build-dir", build, "--image",
                   IMAGE) == 0
    [report_file] = (build / "deltas").rglob("report.json")
    deltas = json.loads(report_file.read_text())
    assert deltas["image_mode"]["pull_bytes"] == update["pull_bytes"]
    assert deltas["image_mode"]["from_commit"] == pair.commit1
    text = report_file.with_name("report.txt").read_text()
    assert f"image mode (bootc) from {pair.commit1[:12]}: {update['changed_layers']} of " in text
    assert "single-layer image" in text and "ostree static delta" in text
    assert f"as a tar-diff delta {human_bytes(update['delta']['bytes'])}" in text


def _content_by_group(build: Path, commit: str) -> dict[str, Any]:
    repo = build / "ostree/repo"
    tree = CommitTree(repo, commit, Runner())
    owners = {moved(p): n for p, n in package_files(Repo(repo, Runner()), commit).items()}
    found: dict[str, list[Any]] = {}
    for node in tree.nodes():
        if not node.path or node.path.startswith("var/"):
            continue
        image_node = replace(node, path=moved(node.path))
        found.setdefault(group_of(image_node, owners), []).append(
            (image_node.path, node.mode, node.uid, node.gid, node.xattrs, node.checksum,
             node.target))
    return {group: sorted(items) for group, items in found.items()}



def test_the_podman_files_follow_the_image(first: tuple[Path, dict[str, Any]]) -> None:
    """The Containerfile (MicroShift's image-mode pattern) installs the lock's MicroShift
    packages and pulls every embedded image by digest into /usr/lib/containers/storage;
    bootc-image-builder's config.toml holds only keys bib reads."""
    build, _ = first
    text = (build / "bootc" / f"{IMAGE}.Containerfile").read_text()
    assert text.splitlines()[4].startswith("FROM registry.redhat.io/rhel9/rhel-bootc")
    assert "dnf install -y microshift-core " in text and "microshift-update" in text
    blueprint = tomllib.loads((build / "blueprints" / f"{IMAGE}.toml").read_text())
    assert blueprint["containers"] and all(f"docker://{c['source']}" in text
                                           for c in blueprint["containers"])
    assert "--root /usr/lib/containers/storage" in text
    assert "RUN systemctl enable microshift.service" in text
    assert text.rstrip().endswith("RUN bootc container lint")
    config = (build / "bootc" / f"{IMAGE}.config.toml").read_text()
    assert check_bib_config(config, "config.toml")["customizations"]["filesystem"]
    with pytest.raises(BuildError, match=r"customizations\.services is not a key "
                                         r"bootc-image-builder reads"):
        check_bib_config("[customizations.services]\nenabled = ['x']\n", "config.toml")


def test_without_the_whole_previous_image_no_delta_is_made(
        composed_pair: ComposedPair, first: tuple[Path, dict[str, Any]],
        tmp_path: Path) -> None:
    """A layout pruned of a blob of the previous image: the build goes on, without a delta
    it could not make, and says why."""
    build, report1 = first
    next_build = copy_build(build, tmp_path / "next")
    # microshift-core's layer changes with every release: the next build does not write
    # it again.
    [core] = [layer for layer in report1["layers"] if "rpm:microshift-core" in layer["groups"]]
    Layout(next_build / f"bootc/{IMAGE}").blob_path(core["digest"]).unlink()
    report2 = bootc_build(composed_pair, next_build, composed_pair.commit2,
                          composed_pair.release2)
    assert report2["update"]["delta"] is None and report2["update"]["pull_bytes"] > 0
    assert not (next_build / f"bootc/{IMAGE}.{ARCH}.delta").exists()
