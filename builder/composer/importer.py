"""Import an Image Builder `edge-commit` tarball into the local ostree repository.

What the tarball holds (osbuild/osbuild stages/org.osbuild.ostree.commit): the stage commits
into `/repo` (an archive repo) and writes `/compose.json` with rpm-ostree's
`--write-composejson-to`, whose keys include `ref` and `ostree-commit` (coreos/rpm-ostree
rpmostree_composeutil_write_composejson). osbuild-composer tars that tree as commit.tar.

Importing with `ostree pull-local` makes a remote compose land exactly where a local compose
would (DIR/ostree/repo), so static deltas and installer ISOs work the same afterwards.
"""

from __future__ import annotations

import json
import re
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import BuildError
from builder.core.ostree import Repo
from builder.core.progress import Progress
from builder.core.runner import Runner

CHECKSUM_RE = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class ImportedCommit:
    ref: str
    commit: str
    repo: Path


def read_compose_json(path: Path, tarball: Path) -> tuple[str, str]:
    """(ref, commit checksum) from the tarball's compose.json, validated."""
    if not path.is_file():
        raise BuildError(f"{tarball}: compose.json is missing; this is not an edge-commit tarball",
                         hint="was the compose type edge-commit?")
    try:
        data = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise BuildError(f"{tarball}: compose.json is not valid JSON: {exc}") from exc
    ref, commit = data.get("ref"), data.get("ostree-commit")
    if not isinstance(ref, str) or not ref:
        raise BuildError(f"{tarball}: compose.json: field 'ref' is missing or empty")
    if not isinstance(commit, str) or not CHECKSUM_RE.match(commit):
        raise BuildError(f"{tarball}: compose.json: field 'ostree-commit' must be a 64-hex "
                         f"sha256 checksum, got {commit!r}")
    return ref, commit


def _extract(tarball: Path, dest: Path) -> None:
    try:
        with tarfile.open(tarball) as tar:
            # The "data" filter refuses absolute paths, `..`, device nodes and links that
            # escape dest: the tarball comes from a remote service.
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise BuildError(f"{tarball}: cannot extract the commit tarball: {exc}",
                         hint="the download may be truncated; fetch it again") from exc


def import_commit_tarball(
    tarball: Path,
    repo: Path,
    runner: Runner,
    progress: Progress,
    *,
    expected_ref: str | None = None,
) -> ImportedCommit:
    """Pull the tarball's commit into `repo`, update the summary, verify the new head."""
    # archive mode: what HTTP servers and static deltas want
    Repo(repo, runner).init("archive")
    # Extract next to the repo rather than in /tmp: commits are large and /tmp is often
    # a small tmpfs. The temp dir goes away whatever happens.
    with tempfile.TemporaryDirectory(prefix=".composer-import-", dir=repo.parent) as tmp:
        root = Path(tmp)
        _extract(tarball, root)
        ref, commit = read_compose_json(root / "compose.json", tarball)
        if expected_ref is not None and ref != expected_ref:
            raise BuildError(f"{tarball}: compose.json names ref {ref!r}, expected "
                             f"{expected_ref!r}", hint="check --ref against the compose")
        source = root / "repo"
        if not (source / "config").is_file():
            raise BuildError(f"{tarball}: repo/ is missing or not an ostree repository")
        # Check the tarball agrees with itself before touching the local repo, so a
        # mismatching tarball leaves DIR/ostree/repo unchanged.
        in_tarball = runner.output(["ostree", f"--repo={source}", "rev-parse", ref]).strip()
        if in_tarball != commit:
            raise BuildError(f"{tarball}: ref {ref} in repo/ is {in_tarball}, but compose.json "
                             f"says {commit}")
        progress.info(f"importing {ref} = {commit[:12]} into {repo}", ref=ref, commit=commit)
        runner.run(["ostree", f"--repo={repo}", "pull-local", str(source), ref])
    head = runner.output(["ostree", f"--repo={repo}", "rev-parse", ref]).strip()
    if head != commit:
        raise BuildError(f"{repo}: after import, ref {ref} is {head}, expected {commit}")
    runner.run(["ostree", f"--repo={repo}", "summary", "-u"])
    return ImportedCommit(ref=ref, commit=commit, repo=repo)
