"""Publish a service-built ostree commit as this release's commit in DIR/ostree/repo.

What the tarball holds (osbuild/osbuild stages/org.osbuild.ostree.commit): the stage commits
into `/repo` (an archive repo) and writes `/compose.json` with rpm-ostree's
`--write-composejson-to`, whose keys include `ref` and `ostree-commit` (coreos/rpm-ostree
rpmostree_composeutil_write_composejson). osbuild-composer tars that tree as commit.tar.

The service's commit is not published as it is: its `version` is the distro's (osbuild/images
pkg/manifest/commit.go stamps OsVersion, e.g. 9.6), and without `url` + `parent` in the
request it has no parent. Its tree is re-committed instead, the way the local compose commits
(builder/compose/commit.py): `ostree commit --tree=ref=SERVICE_COMMIT` (no file is copied or
re-hashed) with the ref's current head as parent, the release version as `version`, the
release's source_date_epoch as timestamp, and the service commit's other metadata kept; what
the service stamped is recorded as microshift.composer.{commit,version,compose}. Deltas,
reports, installer manifests and devices then see one chain of release versions whoever
built each commit. Crash safety as in the local compose: nothing in DIR/ostree/repo changes
until the new commit is complete; the ref moves last, then the summary is regenerated.
"""

from __future__ import annotations

import fcntl
import json
import re
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import BuildError
from builder.core.ostree import Repo, ostree_timestamp
from builder.core.progress import Progress
from builder.core.runner import Runner
from builder.core.signing import SigningKey, stop_agent

CHECKSUM_RE = re.compile(r"^[0-9a-f]{64}$")
# Set by this import itself (or by --bind-ref), never copied from the service's commit.
OWN_KEYS = frozenset({"version", "ostree.ref-binding", "ostree.collection-binding",
                      "ostree.collection-refs-binding"})


@dataclass(frozen=True)
class Publish:
    """How the service's commit becomes this release's commit."""

    image: str                  # blueprint name: microshift.image
    blueprint_version: str
    version: str                # the release's version-release: the commit's `version`
    timestamp: int              # the release's source_date_epoch
    compose: str                # the service's compose uuid
    key: SigningKey | None = None


@dataclass(frozen=True)
class ImportedCommit:
    ref: str
    commit: str
    parent: str | None
    version: str
    service_commit: str
    service_version: str | None
    changed: bool
    repo: Path


def read_compose_json(path: Path, tarball: Path) -> tuple[str, str]:
    """(ref, commit checksum) from the tarball's compose.json, validated."""
    if not path.is_file():
        raise BuildError(f"{tarball}: compose.json is missing; this is not an ostree commit "
                         "tarball (was the image type edge-commit or iot-commit?)")
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
            # escape dest: the tarball comes from a remote service. Python before 3.11.4
            # (Debian 12 has 3.11.2) has no filters: the same checks by hand.
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, filter="data")
            else:
                tar.extractall(dest, members=_data_members(tar, dest))
    except (tarfile.TarError, OSError) as exc:
        raise BuildError(f"{tarball}: cannot extract the commit tarball: {exc}; the download "
                         "may be truncated, fetch it again") from exc


def _data_members(tar: tarfile.TarFile, dest: Path) -> list[tarfile.TarInfo]:
    """What tarfile's "data" filter lets through, or a TarError naming the first member it
    would refuse."""
    root = dest.resolve()
    members = tar.getmembers()
    for member in members:
        target = (root / member.name).resolve()
        if member.name.startswith("/") or not target.is_relative_to(root):
            raise tarfile.TarError(f"member {member.name!r} is outside the destination")
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            raise tarfile.TarError(f"member {member.name!r} is a special file")
        if member.issym() or member.islnk():
            base = target.parent if member.issym() else root
            linked = (base / member.linkname).resolve()
            if member.linkname.startswith("/") or not linked.is_relative_to(root):
                raise tarfile.TarError(f"member {member.name!r} links outside the "
                                       f"destination ({member.linkname!r})")
        member.mode &= 0o755  # no setuid/setgid/sticky, no group or other write
    return members


@contextmanager
def _repo_lock(repo: Path) -> Iterator[None]:
    """DIR/ostree/.lock, the lock the local compose holds: one writer of the repo at a time."""
    lock = repo.parent / ".lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise BuildError(f"another compose or import is writing {repo}; wait for it "
                             "to finish") from exc
        yield


def metadata_keys(raw: str) -> list[str]:
    """Top-level keys of the metadata dict in `ostree show --raw` (GVariant text)."""
    start = raw.find("({")
    if start < 0:
        return []
    keys: list[str] = []
    depth, index, expect_key = 0, start + 2, True
    while index < len(raw):
        char = raw[index]
        if char in "'\"":
            end = index + 1
            while end < len(raw) and raw[end] != char:
                end += 2 if raw[end] == "\\" else 1
            if depth == 0 and expect_key:
                keys.append(raw[index + 1:end])
                expect_key = False
            index = end
        elif char in "([{<":
            depth += 1
        elif char in ")]}>":
            if depth == 0:
                break
            depth -= 1
        elif char == "," and depth == 0:
            expect_key = True
        index += 1
    return keys


def _kept_metadata(source: Repo, commit: str) -> list[str]:
    """--add-metadata arguments that carry the service commit's metadata over."""
    raw = source.runner.output(["ostree", f"--repo={source.path}", "show", "--raw", commit])
    args = []
    for key in metadata_keys(raw):
        if key in OWN_KEYS or key.startswith("microshift."):
            continue
        value = source.runner.output(["ostree", f"--repo={source.path}", "show",
                                      f"--print-metadata-key={key}", commit]).strip()
        args.append(f"--add-metadata={key}={value}")
    return args


def import_commit_tarball(tarball: Path, repo: Path, runner: Runner, progress: Progress,
                          publish: Publish, *, expected_ref: str | None = None
                          ) -> ImportedCommit:
    """Re-commit the tarball's tree onto the ref in `repo`, sign, move the ref, summary."""
    archive = Repo(repo, runner)
    archive.init("archive")  # what HTTP servers and static deltas want
    with _repo_lock(repo):
        # Extracted next to the repo rather than in /tmp: commits are large, /tmp is small.
        with tempfile.TemporaryDirectory(prefix=".composer-import-", dir=repo.parent) as tmp:
            imported = _stage(Path(tmp), tarball, archive, progress, publish=publish,
                              expected_ref=expected_ref)
        if not imported.changed:
            return imported
        try:
            if publish.key is not None:
                archive.gpg_sign(imported.commit, publish.key)
            archive.set_ref(imported.ref, imported.commit)
            archive.summary_update(publish.key)
        finally:
            if publish.key is not None:
                stop_agent(runner, publish.key.homedir)
    return imported


def _stage(root: Path, tarball: Path, archive: Repo, progress: Progress, *, publish: Publish,
           expected_ref: str | None) -> ImportedCommit:
    """Check the tarball, re-commit its tree and copy the new commit into `archive`."""
    _extract(tarball, root)
    ref, service_commit = read_compose_json(root / "compose.json", tarball)
    if expected_ref is not None and ref != expected_ref:
        raise BuildError(f"{tarball}: compose.json names ref {ref!r}, expected "
                         f"{expected_ref!r}; check --ref against the compose")
    source = Repo(root / "repo", archive.runner)
    if not source.exists():
        raise BuildError(f"{tarball}: repo/ is missing or not an ostree repository")
    # The tarball must agree with itself before anything in the published repo changes.
    in_tarball = source.rev_parse(ref)
    if in_tarball != service_commit:
        raise BuildError(f"{tarball}: ref {ref} in repo/ is {in_tarball}, but compose.json "
                         f"says {service_commit}")
    service_version = source.metadata(service_commit, "version")
    head = archive.rev_parse(ref)
    if head is not None and archive.metadata(head, "version") == publish.version and \
            archive.content_checksum(head) == source.content_checksum(service_commit):
        progress.info(f"{ref} = {head}: already holds this content as {publish.version}; "
                      "unchanged", ref=ref, commit=head)
        return ImportedCommit(ref, head, archive.parent(head), publish.version,
                              service_commit, service_version, False, archive.path)
    commit = _recommit(source, service_commit, ref, head, publish)
    progress.info(f"service commit {service_commit[:12]} (version {service_version}) -> "
                  f"{ref} = {commit[:12]}, version {publish.version}, parent "
                  f"{head[:12] if head else 'none'}", ref=ref, commit=commit,
                  service_commit=service_commit, service_version=service_version)
    archive.pull_local(source.path, commit)
    return ImportedCommit(ref, commit, head, publish.version, service_commit, service_version,
                          True, archive.path)


def _recommit(source: Repo, service_commit: str, ref: str, parent: str | None,
              publish: Publish) -> str:
    """The service's tree as a commit of this release, in the extracted repo."""
    metadata = {"version": publish.version, "microshift.image": publish.image,
                "microshift.blueprint-version": publish.blueprint_version,
                "microshift.composer.commit": service_commit,
                "microshift.composer.compose": publish.compose}
    service_version = source.metadata(service_commit, "version")
    if service_version is not None:
        metadata["microshift.composer.version"] = service_version
    argv = ["ostree", f"--repo={source.path}", "commit", "--orphan",
            f"--tree=ref={service_commit}", f"--parent={parent or 'none'}",
            f"--bind-ref={ref}", f"--timestamp={ostree_timestamp(publish.timestamp)}",
            f"--subject=MicroShift {publish.version} {publish.image} (osbuild-composer "
            f"compose {publish.compose})",
            *_kept_metadata(source, service_commit),
            *(f"--add-metadata-string={key}={value}" for key, value in sorted(metadata.items()))]
    commit = source.runner.output(argv).strip()
    if not CHECKSUM_RE.match(commit):
        raise BuildError(f"ostree commit printed {commit!r}, expected a checksum")
    return commit
