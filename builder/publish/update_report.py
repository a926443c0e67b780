"""`diff FROM TO`: what an update contains and what it costs, before a fleet pays for it.

The changes (builder/publish/changes.py) and the download of the update path FROM -> TO
(builder/publish/deltas.py): the static delta when one was generated, the plain object
pull and the full commit, with the transfer time at 5 and 10 Mbit/s.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from builder.core.errors import BuildError
from builder.core.ostree import Repo, delta_dir
from builder.core.progress import human_bytes
from builder.publish.changes import CommitChanges, commit_changes
from builder.publish.report import (
    LINK_SPEEDS_MBIT,
    UpdatePath,
    commit_bytes,
    measure_update,
    objects_bytes,
    transfer_seconds,
)


@dataclass(frozen=True)
class UpdateReport:
    changes: CommitChanges
    delta_bytes: int | None          # None: no static delta FROM -> TO in the repository
    object_pull_bytes: int
    full_bytes: int
    seconds: dict[str, dict[str, float | None]]

    def to_dict(self) -> dict[str, Any]:
        return {**self.changes.to_dict(),
                "update": {"delta_bytes": self.delta_bytes,
                           "object_pull_bytes": self.object_pull_bytes,
                           "full_bytes": self.full_bytes, "seconds": self.seconds}}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def text(self) -> str:
        lines = [self.changes.text(), "  download:"]
        if self.delta_bytes is None:
            lines.append("    static delta  none in the repository (`python -m builder "
                         "deltas` makes one); devices pull objects")
        for label, size, key in (("static delta", self.delta_bytes, "delta"),
                                 ("object pull", self.object_pull_bytes, "object_pull"),
                                 ("full commit", self.full_bytes, "full")):
            if size is None:
                continue
            times = ", ".join(f"{_secs(self.seconds[f'{s}mbit'][key])} at {s} Mbit/s"
                              for s in LINK_SPEEDS_MBIT)
            lines.append(f"    {label:<13} {human_bytes(size):>10}  ({times})")
        return "\n".join(lines)


def _secs(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.2f}s" if seconds < 10 else f"{seconds:.0f}s"


def resolve(repo: Repo, rev: str) -> str:
    """A commit checksum (or a unique prefix of one), a ref, or REF^ to a checksum."""
    commit = repo.rev_parse(rev)
    if commit is None or not repo.has_commit(commit):
        refs = ", ".join(repo.refs()) or "none"
        raise BuildError(f"{repo.path}: no commit {rev!r}",
                         hint=f"give a commit checksum or a ref (refs here: {refs})")
    return commit


def update_report(repo: Repo, from_rev: str, to_rev: str) -> UpdateReport:
    if not repo.exists():
        raise BuildError(f"no ostree repository at {repo.path}",
                         hint="run `python -m builder compose` first")
    old, new = resolve(repo, from_rev), resolve(repo, to_rev)
    changes = commit_changes(repo, old, new)
    if (delta_dir(repo.path, old, new) / "superblock").is_file():
        path = measure_update(repo, old, new)
        return UpdateReport(changes, path.delta_bytes, path.object_pull_bytes, path.full_bytes,
                            _seconds(path))
    target = repo.tree_objects(new)
    full, _ = objects_bytes(repo, target)
    full += commit_bytes(repo, new)
    pull, _ = objects_bytes(repo, target - repo.tree_objects(old))
    pull += commit_bytes(repo, new)
    seconds: dict[str, dict[str, float | None]] = {
        f"{s}mbit": {"delta": None, "object_pull": round(transfer_seconds(pull, s), 3),
                     "full": round(transfer_seconds(full, s), 3)} for s in LINK_SPEEDS_MBIT}
    return UpdateReport(changes, None, pull, full, seconds)


def _seconds(path: UpdatePath) -> dict[str, dict[str, float | None]]:
    return {speed: dict(times) for speed, times in asdict(path)["seconds"].items()}
