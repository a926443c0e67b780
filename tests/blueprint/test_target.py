"""The ref of an image is worked out in one place and read back by every later stage."""

from __future__ import annotations

import json
import re
from pathlib import Path

from builder.blueprint.target import image_target
from builder.context import Context
from tests.support.cli import PROJECT_ROOT, RELEASE


def test_the_ref_is_computed_in_one_place_only() -> None:
    """release.yaml's ostree.ref, the profile's ref and the default meet in target_ref:
    no other module of the package calls ref_for."""
    callers = sorted(path.relative_to(PROJECT_ROOT).as_posix()
                     for path in (PROJECT_ROOT / "builder").rglob("*.py")
                     if re.search(r"\.ref_for\(", path.read_text()))
    assert callers == ["builder/blueprint/target.py"]
    assert not any("def image_ref(" in path.read_text()
                   for path in (PROJECT_ROOT / "builder").rglob("*.py"))


def test_later_stages_read_the_ref_the_lock_recorded(tmp_path: Path) -> None:
    ctx = Context(build_dir=tmp_path, release_path=RELEASE)
    lock = tmp_path / "blueprints" / "microshift-minimal.x86_64.lock.json"
    lock.parent.mkdir()
    lock.write_text(json.dumps({"ref": "fleet/x86_64/minimal", "packages": []}))
    target = image_target(ctx, "microshift-minimal")
    assert (target.ref, target.arch, target.lock) == ("fleet/x86_64/minimal", "x86_64", lock)
