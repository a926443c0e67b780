"""Layers planned from history, so that an update re-sends only what changed.

A device pulls every layer whose digest changed. One layer for the whole tree re-sends it
all for any change (rpm-ostree#4953: ~380 MB for a 50 MB change); chunked images
(`rpm-ostree compose build-chunked-oci`, coreos/chunkah) put content into up to 64 layers by
the package that owns it and keep the previous build's assignment. So does this:

- every path is in one group: the RPM package that owns it (`rpm:NAME`), one layer of an
  embedded container image (`store:LAYER`), the rpm database (`rpmdb`, which changes with
  every release), the image's own additions (`bootc`), else by its top directories
  (`other:usr/lib`); every directory is in `skeleton`, the first layer, so each layer holds
  files only and no path is in two layers;
- a group the previous plan placed keeps its layer; a new group takes a free layer, or,
  with all `max_layers` taken, the smallest one. Without a previous plan the largest groups
  get layers of their own and the small ones share.

The plan (group -> layer) is written beside the image (DIR/bootc/NAME.ARCH.plan.json) and is
the next build's input; an unchanged group in an unchanged layer gives the same tar, hence
the same digest (builder/bootc/oci.py writes tars byte-reproducibly).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from builder.bootc.tree import MOVES, Node
from builder.core.errors import InputError

MAX_LAYERS = 64
SKELETON = "skeleton"
PLAN_FORMAT = "microshift-edge-builder/bootc-layer-plan/v1"
STORE = MOVES[1][1]
RPMDB_DIRS = ("usr/lib/sysimage/rpm", "usr/share/rpm")


@dataclass(frozen=True)
class Group:
    name: str
    paths: tuple[str, ...]
    size: int


@dataclass(frozen=True)
class LayerPlan:
    max_layers: int
    assignment: dict[str, int] = field(default_factory=dict)   # group -> layer index

    def layers(self) -> list[tuple[int, list[str]]]:
        """(index, its groups in name order), by index."""
        by_index: dict[int, list[str]] = {}
        for name, index in self.assignment.items():
            by_index.setdefault(index, []).append(name)
        return [(index, sorted(by_index[index])) for index in sorted(by_index)]

    def to_json(self) -> str:
        return json.dumps({"format": PLAN_FORMAT, "max_layers": self.max_layers,
                           "assignment": dict(sorted(self.assignment.items()))},
                          indent=2, sort_keys=True) + "\n"


def load_plan(text: str, what: str) -> LayerPlan:
    """A plan written by `to_json` (a previous build's, or one pulled from a registry)."""
    from builder.core.bounded_json import BadDocument, Doc, parse

    try:
        doc = Doc(parse(text.encode(), what, limit=16 * 1024 * 1024), what)
        doc.equals("format", PLAN_FORMAT, PLAN_FORMAT)
        maximum = doc.integer("max_layers", 2, 1000)
        assignment = doc.child("assignment")
        assert assignment is not None
        layers = {name: assignment.integer(name, 0, maximum - 1) for name in assignment.data}
    except BadDocument as exc:
        raise InputError(what, "", exc.problem if not exc.field else
                         f"{exc.field} {exc.problem}") from None
    return LayerPlan(maximum, layers)


def group_of(node: Node, owners: dict[str, str]) -> str:
    path = node.path
    if node.kind == "d":
        group = SKELETON
    elif node.data is not None and not node.checksum:
        group = "bootc"
    elif path.startswith(STORE + "/"):
        parts = path[len(STORE) + 1:].split("/")
        group = f"store:{parts[1]}" if parts[0] == "overlay" and len(parts) > 2 \
            else "store:metadata"
    elif any(path.startswith(directory + "/") for directory in RPMDB_DIRS):
        group = "rpmdb"
    elif path in owners:
        group = f"rpm:{owners[path]}"
    else:
        group = "other:" + "/".join(path.split("/")[:2])
    return group


def groups(nodes: list[Node], owners: dict[str, str]) -> list[Group]:
    members: dict[str, list[Node]] = {}
    for node in nodes:
        members.setdefault(group_of(node, owners), []).append(node)
    return [Group(name, tuple(sorted(n.path for n in found)), sum(n.size for n in found))
            for name, found in sorted(members.items())]


def plan_layers(found: list[Group], previous: LayerPlan | None,
                max_layers: int = MAX_LAYERS) -> LayerPlan:
    if max_layers < 2:
        raise InputError("command line", "--max-layers", f"{max_layers} is too few; allowed: "
                         "2 or more (the directories, and at least one layer of files)")
    sizes = {group.name: group.size for group in found}
    assignment: dict[str, int] = {SKELETON: 0}
    if previous is not None:
        for name, index in previous.assignment.items():
            if name in sizes and name != SKELETON and 0 < index < max_layers:
                assignment[name] = index
    totals = _totals(assignment, sizes)
    new = sorted((name for name in sizes if name not in assignment),
                 key=lambda name: (-sizes[name], name))
    for name in new:
        free = next((i for i in range(1, max_layers) if i not in totals), None)
        index = free if free is not None else min(
            (i for i in totals if i != 0), key=lambda i: (totals[i], i))
        assignment[name] = index
        totals[index] = totals.get(index, 0) + sizes[name]
    return LayerPlan(max_layers, assignment)


def _totals(assignment: dict[str, int], sizes: dict[str, int]) -> dict[int, int]:
    totals: dict[int, int] = {}
    for name, index in assignment.items():
        totals[index] = totals.get(index, 0) + sizes.get(name, 0)
    return totals


def describe(plan: LayerPlan, found: list[Group]) -> list[dict[str, Any]]:
    """Per layer: its groups and size, for the report."""
    sizes = {group.name: group.size for group in found}
    return [{"index": index, "groups": names, "bytes": sum(sizes.get(n, 0) for n in names)}
            for index, names in plan.layers()]
