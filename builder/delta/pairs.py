"""Which old file each new file of an update is a delta against: ostree's own rule.

ostree 2022.7's delta compiler (ostree-repo-static-delta-compilation-analysis.c,
_ostree_delta_compute_similar_objects) calls a new file "modified" when the from-commit
has a file with the same basename (or, in a second pass, the same name before the first
'.') whose size is within 30% of it; .xz and .bz2 files and empty files never are. Both
generators (ostree's, and builder/delta's) pair files by this rule, so their deltas are
comparable object by object.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from builder.core.ostree import TreeFile

SIMILARITY = 0.30  # CONTENT_SIZE_SIMILARITY_THRESHOLD_PERCENT
NEVER_DELTA_SUFFIXES = (".xz", ".bz2")


@dataclass(frozen=True)
class Pair:
    """A modified file: the new file and the old one a delta is made against."""

    new: TreeFile
    old: TreeFile

    @property
    def summed(self) -> int:
        return self.new.size + self.old.size


def _basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _candidate(names: Sequence[str], size: int) -> bool:
    return size > 0 and not any(n.endswith(NEVER_DELTA_SUFFIXES) for n in names)


def _names_match(a: Sequence[str], b: Sequence[str], fuzzy: bool) -> bool:
    for x in a:
        for y in b:
            dot_x, dot_y = x.find("."), y.find(".")
            if fuzzy and dot_x > 0 and dot_y > 0 and dot_x == dot_y:
                if x[:dot_x] == y[:dot_y]:
                    return True
            elif x == y:
                return True
    return False


def _by_object(files: Sequence[TreeFile]) -> dict[str, tuple[TreeFile, list[str]]]:
    objects: dict[str, tuple[TreeFile, list[str]]] = {}
    for f in files:
        objects.setdefault(f.checksum, (f, []))[1].append(_basename(f.path))
    return objects


def similar_pairs(old_files: Sequence[TreeFile], new_files: Sequence[TreeFile]) -> list[Pair]:
    """ostree's modified-file pairing (_ostree_delta_compute_similar_objects), per object."""
    old = sorted(_by_object(old_files).values(), key=lambda item: item[0].size)
    old_checksums = {f.checksum for f in old_files}
    new = {c: v for c, v in _by_object(new_files).items() if c not in old_checksums}
    pairs: list[Pair] = []
    for new_file, new_names in sorted(new.values(), key=lambda item: item[0].size):
        if not _candidate(new_names, new_file.size):
            continue
        low = int(new_file.size * (1.0 - SIMILARITY))
        high = int(new_file.size * (1.0 + SIMILARITY))
        match = None
        for fuzzy in (False, True):
            match = next((o for o, names in old if low <= o.size <= high
                          and _candidate(names, o.size)
                          and _names_match(names, new_names, fuzzy)), None)
            if match is not None:
                break
        if match is not None:
            pairs.append(Pair(new_file, match))
    return pairs
