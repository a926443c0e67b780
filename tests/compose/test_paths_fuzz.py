"""Paths from inputs never leave the image tree: a blueprint's file path, a symlink the base
ships, `..` anywhere. `tree_path` resolves a device path as a chroot would, so whatever the
path and whatever symlinks the tree holds, the answer is inside the tree."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from builder.compose.rootfs import tree_path
from builder.core.errors import BuildError

PARTS = st.sampled_from(["..", ".", "etc", "usr", "local", "link", "loop", "var", "x", ""])
PATHS = st.lists(PARTS, max_size=8).map(lambda parts: "/" + "/".join(parts))
TARGETS = st.one_of(PATHS, st.lists(PARTS, min_size=1, max_size=5).map("/".join),
                    st.sampled_from(["../../../../etc", "/", "..", "link", "loop"])
                    ).filter(bool)  # a symlink needs a target


@pytest.mark.fuzz
@given(path=PATHS, links=st.lists(st.tuples(st.sampled_from(["link", "loop", "usr/local",
                                                               "etc/link"]), TARGETS),
                                  max_size=3))
def test_every_path_resolves_inside_the_tree(path: str, links: list[tuple[str, str]]) -> None:
    tree = Path(tempfile.mkdtemp(prefix="tree-"))
    for folder in ("etc", "usr", "var"):
        (tree / folder).mkdir()
    for name, target in links:
        if not (tree / name).exists() and not (tree / name).is_symlink():
            os.symlink(target, tree / name)
    try:
        resolved = tree_path(tree, path)
    except BuildError as exc:
        assert "too many symlinks" in str(exc)
        return
    assert resolved == tree or tree in resolved.parents, (path, links, resolved)
    assert ".." not in resolved.relative_to(tree).parts
