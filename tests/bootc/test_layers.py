"""Layer planning: bounded, stable across releases, reproducible."""

from __future__ import annotations

import pytest

from builder.bootc.layers import (
    SKELETON,
    Group,
    LayerPlan,
    group_of,
    load_plan,
    plan_layers,
)
from builder.bootc.tree import Node
from builder.core.errors import InputError


def groups(sizes: dict[str, int]) -> list[Group]:
    return [Group(SKELETON, ("usr",), 0), *(Group(name, (name,), size)
                                            for name, size in sizes.items())]


def test_without_history_the_largest_groups_get_their_own_layers() -> None:
    plan = plan_layers(groups({"rpm:big": 100, "rpm:mid": 50, "rpm:a": 1, "rpm:b": 2}), None,
                       max_layers=3)
    assert plan.assignment[SKELETON] == 0
    assert plan.assignment["rpm:big"] == 1 and plan.assignment["rpm:mid"] == 2
    # the small ones share the smallest layer
    assert plan.assignment["rpm:a"] == plan.assignment["rpm:b"] == 2
    assert len(plan.layers()) == 3


def test_a_group_keeps_its_layer_from_the_previous_plan() -> None:
    previous = LayerPlan(64, {SKELETON: 0, "rpm:core": 7, "rpm:gone": 3})
    plan = plan_layers(groups({"rpm:core": 10, "rpm:new": 99}), previous)
    assert plan.assignment["rpm:core"] == 7
    assert plan.assignment["rpm:new"] == 1   # the first free layer, not core's
    assert "rpm:gone" not in plan.assignment


def test_never_more_layers_than_the_bound() -> None:
    plan = plan_layers(groups({f"rpm:p{n}": n for n in range(500)}), None, max_layers=64)
    assert len(plan.layers()) == 64
    assert plan_layers(groups({f"rpm:p{n}": n for n in range(500)}), None) == plan


def test_the_plan_round_trips_and_a_bad_one_is_named() -> None:
    plan = plan_layers(groups({"rpm:a": 1}), None)
    assert load_plan(plan.to_json(), "plan.json") == plan
    with pytest.raises(InputError, match=r"plan\.json: assignment\.rpm:a is 99; allowed"):
        load_plan(plan.to_json().replace('"rpm:a": 1', '"rpm:a": 99'), "plan.json")
    with pytest.raises(InputError, match=r"plan\.json: is not JSON"):
        load_plan("{", "plan.json")
    with pytest.raises(InputError, match="--max-layers"):
        plan_layers(groups({}), None, max_layers=1)


@pytest.mark.parametrize(("path", "kind", "group"), [
    ("usr", "d", SKELETON),
    ("usr/bin/microshift", "-", "rpm:microshift-core"),
    ("usr/lib/containers/storage/overlay/abc/diff/bin/sh", "-", "store:abc"),
    ("usr/lib/containers/storage/overlay-images/images.json", "-", "store:metadata"),
    ("usr/lib/sysimage/rpm/rpmdb.sqlite", "-", "rpmdb"),
    ("usr/lib/unowned/file", "-", "other:usr/lib"),
])
def test_each_path_has_one_group(path: str, kind: str, group: str) -> None:
    owners = {"usr/bin/microshift": "microshift-core"}
    assert group_of(Node(path, kind, 0o644, 0, 0, checksum="c"), owners) == group
