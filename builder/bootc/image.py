"""`bootc`: the image's bootc container image, made from its composed commit.

    DIR/bootc/NAME/                 an OCI image layout: one manifest per architecture
    DIR/bootc/NAME.ARCH.plan.json   the layer plan, the next build's input
    DIR/bootc/NAME.ARCH.json        the report: layers, lint warnings, the equality proof

The tree is the commit's (builder/bootc/tree.py), linted as bootc lints an image
(builder/bootc/lint.py), cut into layers planned from the previous plan
(builder/bootc/layers.py), written reproducibly (builder/bootc/oci.py), read back and proved
equal to the commit (builder/bootc/proof.py) before the layout's index names it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from builder.blueprint.target import ImageTarget
from builder.bootc import lint
from builder.bootc.containerfile import bib_config, containerfile
from builder.bootc.image_delta import write_image_delta
from builder.bootc.layers import (
    MAX_LAYERS,
    SKELETON,
    LayerPlan,
    describe,
    group_of,
    groups,
    load_plan,
    plan_layers,
)
from builder.bootc.oci import CONFIG, LAYER, MANIFEST, Blob, Layout
from builder.bootc.proof import prove
from builder.bootc.tree import (
    PREPARE_ROOT,
    REPLACED,
    ROOT_FS,
    STORAGE_CONF,
    CommitTree,
    Node,
    moved,
    storage_conf,
)
from builder.compose.inputs import load_compose_inputs
from builder.context import Context
from builder.core.errors import BuildError
from builder.core.files import write_atomic
from builder.core.ostree import Repo
from builder.publish.contents import package_files
from builder.release.model import GOARCH

VAR_TMPFILES = "usr/lib/tmpfiles.d/microshift-bootc-var.conf"
ROOT_FS_TEXT = '[install.filesystem.root]\ntype = "{fs}"\n'
COMPOSEFS = "[composefs]\nenabled = yes\n"
API_DIRS = ("boot", "dev", "proc", "run", "sys", "tmp", "var", "sysroot")


@dataclass(frozen=True)
class BootcOptions:
    max_layers: int = MAX_LAYERS
    previous_plan: Path | None = None   # default: the last build's, in DIR/bootc
    root_fs: str = "xfs"                # what `bootc install` formats the root with


@dataclass(frozen=True)
class BootcImage:
    image: str
    arch: str
    commit: str
    manifest: Blob
    layout: Path
    report: dict[str, Any]


@dataclass(frozen=True)
class _Build:
    """One image being made: where from, where to, and its paths."""

    ctx: Context
    target: ImageTarget
    commit: str
    tree: CommitTree
    layout: Layout
    nodes: list[Node]
    owners: dict[str, str]


Written = list[tuple[int, Blob, list[str]]]


def build_bootc_image(ctx: Context, target: ImageTarget,
                      options: BootcOptions | None = None) -> BootcImage:
    options = options or BootcOptions()
    repo = Repo(ctx.layout.ostree_repo, ctx.runner)
    commit = repo.rev_parse(target.ref) if repo.exists() else None
    if commit is None:
        raise BuildError(f"{repo.path} has no commit on {target.ref} for {target.image}",
                         hint=f"compose it first: python -m builder compose --image "
                              f"{target.image}")
    with ctx.progress.step(f"bootc image {target.image} ({target.arch}) of {commit[:12]}"):
        started = time.monotonic()
        tree = CommitTree(repo.path, commit, ctx.runner)
        commit_nodes = tree.nodes()
        nodes = image_tree(commit_nodes, tree, options)
        findings = lint.lint(lint.Tree(nodes, lambda n: b"".join(content(tree, n))),
                             target.image)
        for finding in findings:
            ctx.progress.warn(finding.text())
        owners = {moved(path): name for path, name in package_files(repo, commit).items()}
        build = _Build(ctx, target, commit, tree, Layout(ctx.layout.bootc_layout(target.image)),
                       nodes, owners)
        found = groups(nodes, owners)
        plan = plan_layers(found, _previous(ctx, target, options), options.max_layers)
        build.layout.init()
        written = _write(build, plan)
        manifest, config = _manifest(build, written)
        proof = prove(build.layout, manifest.digest, commit_nodes, tree, nodes)
        ctx.progress.info(f"equality proof: {proof['paths']} paths of the image equal the "
                          f"commit's ({proof['mapped']} moved, {proof['added']} added for "
                          "bootc)")
        _name(build.layout, target, manifest)
        update = _update_cost(ctx, build, written)
        update["delta"] = _delta(ctx, build, update["from_manifest"], manifest)
        report = {**_report(build, manifest, config, written), "proof": proof,
                  "update": update,
                  "lint_warnings": [f.text() for f in findings],
                  "planned_bytes": {layer["index"]: layer["bytes"]
                                    for layer in describe(plan, found)},
                  "seconds": round(time.monotonic() - started, 3)}
        write_atomic(ctx.layout.bootc_plan(target.image, target.arch), plan.to_json())
        _podman_files(ctx, target)
        write_atomic(ctx.layout.bootc_report(target.image, target.arch),
                     json.dumps(report, indent=2, sort_keys=True) + "\n")
        ctx.progress.info(f"{manifest.digest} ({len(written)} layers, "
                          f"{report['compressed_bytes']} bytes compressed)")
        if update["from_manifest"]:
            ctx.progress.info(f"update from {update['from_manifest'][:19]}: a device pulls "
                              f"{update['pull_bytes']} bytes in {update['changed_layers']} "
                              f"layers; a single-layer image would send "
                              f"{update['single_layer_bytes']}")
        if update["delta"]:
            ctx.progress.info(f"as a delta (tar-diff, oci-delta layout): "
                              f"{update['delta']['bytes']} bytes in "
                              f"{ctx.layout.bootc_delta(target.image, target.arch)}")
    return BootcImage(target.image, target.arch, commit, manifest, build.layout.root, report)


def _update_cost(ctx: Context, build: _Build, written: Written) -> dict[str, Any]:
    """What a device on the previous build's image pulls to get this one (the layers whose
    digest it lacks), beside what the same tree in one layer would cost."""
    previous_report = ctx.layout.bootc_report(build.target.image, build.target.arch)
    previous: dict[str, Any] = {}
    if previous_report.is_file():
        previous = json.loads(previous_report.read_text())
    had = {layer["digest"] for layer in previous.get("layers", [])}
    changed = [(index, blob) for index, blob, _ in written if blob.digest not in had]
    single = Layout(ctx.layout.bootc_layout(build.target.image) / ".single")
    single.init()
    blob = single.write_layer(build.nodes, lambda n: content(build.tree, n))
    shutil.rmtree(single.root, ignore_errors=True)
    return {"from_manifest": previous.get("manifest"), "from_commit": previous.get("commit"),
            "changed_layers": len(changed) if previous else None,
            "changed": [index for index, _ in changed] if previous else None,
            "pull_bytes": sum(b.size for _, b in changed) if previous else None,
            "single_layer_bytes": blob.size}


def _delta(ctx: Context, build: _Build, previous: str | None,
           manifest: Blob) -> dict[str, Any] | None:
    """The update from the previous build's image as tar-diffs against its files, when the
    layout still holds that image (builder/bootc/image_delta.py)."""
    dest = ctx.layout.bootc_delta(build.target.image, build.target.arch)
    if previous is None or previous == manifest.digest or not _whole(build.layout, previous):
        if previous is not None and previous != manifest.digest:
            ctx.progress.info(f"no image delta: {build.layout.root} no longer holds every "
                              f"blob of the previous image {previous[:19]}")
        shutil.rmtree(dest, ignore_errors=True)
        return None
    with ctx.progress.step(f"image delta from {previous[:19]}"):
        delta = write_image_delta(build.layout, previous, manifest.digest, dest, ctx.runner,
                                  threads=os.cpu_count() or 1)
        for layer in delta["layers"]:
            ctx.progress.info(f"{layer['to'][:19]}: {layer['layer_bytes']} bytes gzip'ed, "
                              f"tar-diff {layer['tar_diff_bytes']}: sends the {layer['sent']}")
    return delta


def _whole(layout: Layout, manifest: str) -> bool:
    """Whether the layout still has the image: its manifest, config and every layer."""
    if not layout.blob_path(manifest).is_file():
        return False
    document = layout.read_json(manifest)
    digests = [document["config"]["digest"], *(layer["digest"] for layer in document["layers"])]
    return all(layout.blob_path(digest).is_file() for digest in digests)


def _podman_files(ctx: Context, target: ImageTarget) -> None:
    """The Containerfile and bootc-image-builder's config.toml of the image, for users who
    build with podman (builder/bootc/containerfile.py)."""
    inputs = load_compose_inputs(ctx.build_dir, target.image, target.arch)
    write_atomic(ctx.layout.bootc_containerfile(target.image), containerfile(inputs))
    write_atomic(ctx.layout.bootc_bib_config(target.image), bib_config(inputs))


def content(tree: CommitTree, node: Node) -> Iterable[bytes]:
    """A node's bytes: made here, or the commit's (storage.conf naming the moved store)."""
    if node.data is not None:
        return [node.data]
    return tree.read(node.checksum)


def image_nodes(commit_nodes: list[Node], options: BootcOptions) -> list[Node]:
    """The commit's paths where the image has them; /var's content as tmpfiles.d entries;
    what bootc needs of an image's root added."""
    nodes: dict[str, Node] = {}
    var_lines = []
    for node in commit_nodes:
        if node.path == "":
            continue  # the root: a layer names what is in it, not it
        if node.path.startswith("var/"):
            var_lines.append(tmpfiles_line(node))
            continue
        if node.path in REPLACED:
            kind, mode = REPLACED[node.path]
            nodes[node.path] = Node(node.path, kind, mode, 0, 0)
            continue
        nodes[moved(node.path)] = replace(node, path=moved(node.path))
    for path in API_DIRS:
        nodes.setdefault(path, Node(path, "d", 0o755, 0, 0))
    _add(nodes, Node("ostree", "l", 0o777, 0, 0, target="sysroot/ostree"))
    _add(nodes, _file(ROOT_FS, ROOT_FS_TEXT.format(fs=options.root_fs).encode()))
    if PREPARE_ROOT not in nodes:
        _add(nodes, _file(PREPARE_ROOT, COMPOSEFS.encode()))
    if var_lines:
        text = "# /var of the composed commit, made at boot (bootc carries no /var)\n"
        _add(nodes, _file(VAR_TMPFILES, (text + "".join(var_lines)).encode()))
    return [nodes[path] for path in sorted(nodes)]


def image_tree(commit_nodes: list[Node], tree: CommitTree, options: BootcOptions
               ) -> list[Node]:
    """Every path of the image (builder/bootc/tree.py says how it differs from the commit)."""
    return _storage_conf(image_nodes(commit_nodes, options), tree)


def _storage_conf(nodes: list[Node], tree: CommitTree) -> list[Node]:
    """storage.conf naming the store where the image has it (its bytes made here, its
    metadata the commit's)."""
    found = []
    for node in nodes:
        if node.path == STORAGE_CONF and node.kind == "-":
            data = storage_conf(b"".join(tree.read(node.checksum)).decode()).encode()
            found.append(replace(node, data=data, size=len(data)))
        else:
            found.append(node)
    return found


def tmpfiles_line(node: Node) -> str:
    path = "/" + node.path
    if node.kind == "d":
        return f"d {path} {node.mode:04o} {node.uid} {node.gid} - -\n"
    if node.kind == "l":
        return f"L {path} - - - - {node.target}\n"
    raise BuildError(f"{path}: a file in /var, which a bootc image cannot carry (bootc "
                     "applies /var only at install; every update would skip it)",
                     hint="ship it under /usr and create it with a tmpfiles.d entry")


def _file(path: str, data: bytes) -> Node:
    return Node(path, "-", 0o644, 0, 0, size=len(data), data=data)


def _add(nodes: dict[str, Node], node: Node) -> None:
    """Add an image-only node, and the directories above it, where the commit has none (a
    path the commit has stays the commit's; the lint checks it is what bootc wants)."""
    parts = node.path.split("/")
    for depth in range(1, len(parts)):
        directory = "/".join(parts[:depth])
        nodes.setdefault(directory, Node(directory, "d", 0o755, 0, 0))
    nodes.setdefault(node.path, node)


def _previous(ctx: Context, target: ImageTarget, options: BootcOptions) -> LayerPlan | None:
    path = options.previous_plan or ctx.layout.bootc_plan(target.image, target.arch)
    if not path.is_file():
        if options.previous_plan is not None:
            raise BuildError(f"{path} does not exist", hint="give the plan the previous "
                             "release's build wrote (DIR/bootc/NAME.ARCH.plan.json)")
        ctx.progress.info("no previous layer plan: layers are planned from this tree alone")
        return None
    plan = load_plan(path.read_text(), str(path))
    ctx.progress.info(f"layer plan from {path} ({len(plan.assignment)} groups)")
    return plan


def _write(build: _Build, plan: LayerPlan) -> Written:
    by_group: dict[str, list[Node]] = {}
    for node in build.nodes:
        by_group.setdefault(group_of(node, build.owners), []).append(node)
    written: Written = []
    for index, names in plan.layers():
        members = [node for name in names for node in by_group.get(name, [])]
        if not members:
            continue
        blob = build.layout.write_layer(members, lambda n: content(build.tree, n))
        written.append((index, blob, names))
    return written


def _manifest(build: _Build, written: Written) -> tuple[Blob, Blob]:
    release, target, layout = build.ctx.release, build.target, build.layout
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(release.source_date_epoch))
    kernels = sorted({n.path.split("/")[3] for n in build.nodes if n.path.startswith(
        "usr/lib/modules/") and n.path.endswith("/vmlinuz") and n.path.count("/") == 4})
    labels = {"containers.bootc": "1", "ostree.bootable": "1", "ostree.commit": build.commit,
              "org.opencontainers.image.title": target.image,
              "org.opencontainers.image.version": release.evr,
              **({"ostree.linux": kernels[0]} if kernels else {}),
              **({"io.microshift.builder.sample": "true"}
                 if release.ostree.base.is_sample else {})}
    config = layout.put_json({
        "architecture": GOARCH[target.arch], "os": "linux", "created": created,
        "config": {"Labels": labels, "Cmd": ["/sbin/init"], "StopSignal": "SIGRTMIN+3"},
        "rootfs": {"type": "layers", "diff_ids": [blob.diff_id for _, blob, _ in written]},
        "history": [{"created": created, "created_by": "microshift-edge-builder bootc: "
                     + (SKELETON if names == [SKELETON] else ", ".join(names))[:1000]}
                    for _, _, names in written]})
    manifest = layout.put_json({
        "schemaVersion": 2, "mediaType": MANIFEST, "config": config.descriptor(CONFIG),
        "layers": [blob.descriptor(LAYER) for _, blob, _ in written],
        "annotations": {"org.opencontainers.image.version": release.evr}})
    return manifest, config


def _name(layout: Layout, target: ImageTarget, manifest: Blob) -> None:
    """The layout's index: this architecture's manifest replaces its previous one."""
    platform = {"architecture": GOARCH[target.arch], "os": "linux"}
    kept = [m for m in layout.index().get("manifests", [])
            if m.get("platform") != platform]
    entry = manifest.descriptor(MANIFEST, platform=platform, annotations={
        "org.opencontainers.image.ref.name": target.arch})
    layout.write_index(sorted([*kept, entry], key=lambda m: str(m["platform"])))


def _report(build: _Build, manifest: Blob, config: Blob, written: Written) -> dict[str, Any]:
    target = build.target
    return {"image": target.image, "arch": target.arch, "ref": target.ref,
            "commit": build.commit, "manifest": manifest.digest, "config": config.digest,
            "layers": [{"index": index, "digest": blob.digest, "size": blob.size,
                        "diff_id": blob.diff_id, "groups": names}
                       for index, blob, names in written],
            "compressed_bytes": sum(blob.size for _, blob, _ in written)}
