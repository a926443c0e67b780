"""The matrix table of a run of several refs (builder/publish/matrix.py): every path of
every ref, where its parts came from, and totals in which a part made counts once."""

from __future__ import annotations

import json
from pathlib import Path

from builder.context import Context
from builder.publish.matrix import FORMAT, matrix_rows, write_matrix
from builder.publish.report import DeltaReport, UpdatePath
from tests.support.cli import RELEASE

SECONDS = {f"{s}mbit": {"delta": 0.1, "object_pull": 0.2, "full": 0.3} for s in (5, 10)}


def path(source: str | None, version: str | None, size: int, pieces: dict[str, int] | None,
         generated: bool = True) -> UpdatePath:
    return UpdatePath(source, version, size, 3, 0, 10 * size, 5, 100 * size, None, SECONDS,
                      generated=generated, generation_seconds=4.5 if generated else None,
                      pieces={**pieces, "made_seconds": 2.0} if pieces else None)


def test_every_path_of_every_ref_with_its_parts(tmp_path: Path) -> None:
    full = DeltaReport("microshift/x86_64/full", "b" * 64, "4.14.4", "/r", (
        path("a" * 64, "4.14.3", 2000, {"parts": 3, "cached": 1, "made": 2, "shared": 0}),
        path(None, None, 90000, {"parts": 3, "cached": 0, "made": 3, "shared": 0})))
    minimal = DeltaReport("microshift/x86_64/minimal", "c" * 64, "4.14.4", "/r", (
        path("d" * 64, "4.14.3", 1500, {"parts": 2, "cached": 0, "made": 0, "shared": 2}),
        path(None, None, 30000, None, generated=False)))
    rows = matrix_rows([full, minimal])
    assert [(r["ref"], r["from_version"], r["made"], r["shared"], r["generated"])
            for r in rows] == [
        ("microshift/x86_64/full", "4.14.3", 2, 0, True),
        ("microshift/x86_64/full", None, 3, 0, True),
        ("microshift/x86_64/minimal", "4.14.3", 0, 2, True),
        ("microshift/x86_64/minimal", None, None, None, False)]
    ctx = Context(tmp_path / "build", RELEASE)
    data = write_matrix(ctx, [full, minimal], 12.5)
    assert json.loads((tmp_path / "build" / "deltas" / "matrix.json").read_text()) == data
    assert data["format"] == FORMAT and data["wall_seconds"] == 12.5
    assert data["totals"] == {"paths": 4, "delta_bytes": 123500, "parts_made": 5,
                              "cached_part_uses": 1, "shared_part_uses": 2, "kept": 1}
    text = (tmp_path / "build" / "deltas" / "matrix.txt").read_text()
    assert "4 paths, 120.6 KiB of deltas in 12.5s: 5 parts made, 1 uses of cached parts, " \
           "2 of parts shared within the run, 1 deltas kept" in text
    assert "scratch" in text and "kept" in text
