"""Where lte-update cuts the link: inside the delta file the signed index lists for v1, read
as the device reads the index (the first lte-update run in a VM stopped on a key the index
does not have)."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.core.errors import BuildError
from builder.publish.offline import OfflineFile, index_json
from builder.vm.scenarios import cut_offsets

REF = "microshift/x86_64/microshift-minimal"
V1, V2 = "a" * 64, "b" * 64


def _index(tmp_path: Path, size: int) -> Path:
    files = [OfflineFile(f"{V1}-{V2}.delta", V1, "1", V2, "2", size, "c" * 64, 1),
             OfflineFile(f"empty-{V2}.delta", None, None, V2, "2", 10 * size, "d" * 64, 1)]
    path = tmp_path / "index.json"
    path.write_text(index_json(REF, V2, "2", files))
    return path


def test_cuts_are_distinct_offsets_inside_the_file(tmp_path: Path) -> None:
    index = _index(tmp_path, 42_000)
    cuts = cut_offsets(index, REF, V1, 5)
    assert cuts == sorted(set(cuts)) and len(cuts) == 5
    assert all(0 < cut < 42_000 - 1 for cut in cuts)
    assert cut_offsets(index, REF, V1, 5) == cuts


def test_no_delta_from_the_commit_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="no delta file from eeeeeeeeeeee"):
        cut_offsets(_index(tmp_path, 1000), REF, "e" * 64, 3)
