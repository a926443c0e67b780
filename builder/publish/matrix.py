"""The release matrix in one table: every update path of every ref a run made deltas for
(DIR/deltas/matrix.json and matrix.txt), with its bytes, where its parts came from and when
it was ready.

Per path: the ref, where it starts (a version, or scratch), the delta's bytes and parts;
with the builder's generator the parts taken from the cache (made by an earlier run or CI
job), made in this run first for this path, and made for another path of the run and used
here too; the seconds spent making the parts it used, and when its delta was written.
A part is made once: the "made" column adds up to the parts the run made.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from builder.context import Context
from builder.core.files import write_atomic
from builder.core.progress import human_bytes
from builder.publish.report import DeltaReport

FORMAT = "microshift-edge-builder/delta-matrix/v1"


def matrix_rows(reports: Sequence[DeltaReport]) -> list[dict[str, Any]]:
    rows = []
    for report in reports:
        for path in report.paths:
            pieces = path.pieces or {}
            rows.append({
                "ref": report.ref, "to_version": report.to_version,
                "from_commit": path.from_commit, "from_version": path.from_version,
                "delta_bytes": path.delta_bytes, "parts": path.delta_parts,
                "generated": path.generated,
                "cached": pieces.get("cached"), "made": pieces.get("made"),
                "shared": pieces.get("shared"), "made_seconds": pieces.get("made_seconds"),
                "ready_seconds": path.generation_seconds})
    return rows


def write_matrix(ctx: Context, reports: Sequence[DeltaReport], wall: float) -> dict[str, Any]:
    rows = matrix_rows(reports)
    data = {"format": FORMAT, "wall_seconds": wall, "paths": rows,
            "totals": {"paths": len(rows), "delta_bytes": sum(r["delta_bytes"] for r in rows),
                       "parts_made": sum(r["made"] or 0 for r in rows),
                       "cached_part_uses": sum(r["cached"] or 0 for r in rows),
                       "shared_part_uses": sum(r["shared"] or 0 for r in rows),
                       "kept": sum(1 for r in rows if not r["generated"])}}
    out = ctx.layout.deltas
    write_atomic(out / "matrix.json", json.dumps(data, indent=2, sort_keys=True) + "\n")
    write_atomic(out / "matrix.txt", matrix_text(data) + "\n")
    ctx.progress.info(matrix_text(data))
    return data


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def matrix_text(data: dict[str, Any]) -> str:
    lines = [f"{'ref':<40}{'from':>12}{'delta':>12}{'parts':>7}{'cached':>8}{'made':>6}"
             f"{'shared':>8}{'making s':>10}{'ready s':>9}"]
    for row in data["paths"]:
        origin = row["from_version"] or ("scratch" if not row["from_commit"] else "?")
        ready = "kept" if not row["generated"] else _cell(row["ready_seconds"])
        lines.append(f"{row['ref']:<40}{origin:>12}{human_bytes(row['delta_bytes']):>12}"
                     f"{row['parts']:>7}{_cell(row['cached']):>8}{_cell(row['made']):>6}"
                     f"{_cell(row['shared']):>8}{_cell(row['made_seconds']):>10}{ready:>9}")
    totals = data["totals"]
    lines.append(f"{totals['paths']} paths, {human_bytes(totals['delta_bytes'])} of deltas in "
                 f"{data['wall_seconds']:.1f}s: {totals['parts_made']} parts made, "
                 f"{totals['cached_part_uses']} uses of cached parts, "
                 f"{totals['shared_part_uses']} of parts shared within the run, "
                 f"{totals['kept']} deltas kept")
    return "\n".join(lines)
