"""Depsolve a blueprint's packages with libsolv before any compose starts.

The pool holds the project's repository for the architecture (DIR/repo/ARCH) and the base OS
repositories named in release.yaml (`sample` -> DIR/sample-base/repo/ARCH, `path`, or `url`,
with `{arch}` or `$basearch` replaced by the architecture, whose repomd.xml, primary
and filelists are downloaded into DIR/cache/repos/). Metadata is verified against the
checksums in repomd.xml before libsolv reads it. Problems come back in libsolv's own words
(`Problem.findallproblemrules()` -> `RuleInfo.problemstr()`), naming the packages.
"""

from __future__ import annotations

import bz2
import fnmatch
import gzip
import hashlib
import lzma
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from builder.core.build_layout import Layout
from builder.core.errors import BuildError, InputError
from builder.core.files import write_atomic
from builder.core.runner import Runner
from builder.release.model import Release

PROJECT_REPO = "microshift"
GLOB_CHARS = re.compile(r"[*?\[]")
Fetch = Callable[[str], bytes]


@dataclass(frozen=True)
class RepoSource:
    name: str
    kind: str      # "project" | "sample" | "path" | "url"
    location: str  # a local directory holding repodata/, or a URL


@dataclass(frozen=True)
class LockedPackage:
    name: str
    epoch: int
    version: str
    release: str
    arch: str
    repo: str
    location: str  # href relative to the repository's base
    checksum: str  # "sha256:HEX"

    @property
    def nevra(self) -> str:
        epoch = f"{self.epoch}:" if self.epoch else ""
        return f"{self.name}-{epoch}{self.version}-{self.release}.{self.arch}"

    def as_json(self) -> dict[str, Any]:
        algorithm, _, digest = self.checksum.partition(":")
        extra = {"sha256": digest} if algorithm == "sha256" else {}
        return {"nevra": self.nevra, **asdict(self), **extra}


def repo_sources(build_dir: Path, release: Release, arch: str) -> list[RepoSource]:
    """The project's repository for `arch`, then release.yaml's base repositories (for
    `arch`), in that order."""
    layout = Layout(build_dir)
    sources = [RepoSource(PROJECT_REPO, "project", str(layout.yum_repo(arch)))]
    for index, repo in enumerate(release.base_repos):
        if repo.name == PROJECT_REPO:
            raise InputError(str(release.path), f"base.repos[{index}].name",
                             f"{repo.name!r} is reserved for the project's own repository")
        if repo.kind == "sample":
            sources.append(RepoSource(repo.name, "sample",
                                      str(layout.sample_base_repo(arch))))
        else:
            sources.append(RepoSource(repo.name, repo.kind, repo.location_for(arch)))
    return sources


def depsolve(packages: Sequence[tuple[str, str]], sources: Sequence[RepoSource], arch: str,
             cache_dir: Path, *, runner: Runner | None = None,
             fetch: Fetch | None = None) -> list[LockedPackage]:
    """Resolve `packages` ((name, version) as in a blueprint) for `arch`, or raise BuildError
    with libsolv's explanation of every problem."""
    import solv

    pool = solv.Pool()
    pool.setarch(arch)
    with tempfile.TemporaryDirectory(prefix="depsolve-") as scratch:
        for source in sources:
            local = _local_repo(source, cache_dir, fetch)
            _load(pool, source, local, Path(scratch), runner or Runner())
    pool.addfileprovides()
    pool.createwhatprovides()
    jobs = [_job(pool, name, version) for name, version in packages]
    solver = pool.Solver()
    problems = solver.solve(jobs)
    if problems:
        raise BuildError(_explain(pool, problems, packages, arch),
                         hint="fix the image's packages (blueprints/profiles.yaml) or the "
                              "repositories; `python -m builder rpms` rebuilds the project's")
    chosen = solver.transaction().newsolvables()
    return sorted((_locked(s) for s in chosen), key=lambda p: (p.name, p.arch, p.nevra))


def _local_repo(source: RepoSource, cache_dir: Path, fetch: Fetch | None) -> Path:
    if source.kind != "url":
        local = Path(source.location)
        if not (local / "repodata" / "repomd.xml").is_file():
            hint = {"project": "run `python -m builder rpms --build-dir DIR` first",
                    "sample": "run `python -m builder sample-base --build-dir DIR` first"}
            raise BuildError(f"repository {source.name}: {local} has no repodata/repomd.xml",
                             hint=hint.get(source.kind, "point release.yaml at a yum repo"))
        return local
    return _download_repo(source, cache_dir / _cache_name(source), fetch or _http_get)


def _cache_name(source: RepoSource) -> str:
    return f"{source.name}-{hashlib.sha256(source.location.encode()).hexdigest()[:12]}"


def _download_repo(source: RepoSource, dest: Path, fetch: Fetch) -> Path:
    """Fetch repomd.xml (always: it names the current metadata) and the primary and filelists
    files it lists (only when the cached copy's checksum differs)."""
    import solv

    base = source.location.rstrip("/") + "/"
    (dest / "repodata").mkdir(parents=True, exist_ok=True)
    write_atomic(dest / "repodata" / "repomd.xml", fetch(base + "repodata/repomd.xml"))
    probe_pool = solv.Pool()  # the repo needs its pool alive: libsolv frees repos with it
    probe = probe_pool.add_repo(source.name)
    _add_repomd(probe, dest)
    for kind in ("primary", "filelists"):
        entry = _repomd_entry(probe, kind)
        if entry is None:
            continue
        href, checksum = entry
        target = _inside(dest, href, source)
        if not (target.is_file() and _digest(target, checksum[0]) == checksum[1]):
            target.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(target, fetch(base + href))
    return dest


def _http_get(url: str) -> bytes:
    import requests

    try:
        response = requests.get(url, timeout=60)
    except requests.RequestException as exc:
        raise BuildError(f"cannot download {url}: {exc}",
                         hint="check the repository URL in release.yaml base.repos") from exc
    if response.status_code != 200:
        raise BuildError(f"cannot download {url}: HTTP {response.status_code}",
                         hint="check the repository URL in release.yaml base.repos")
    return response.content


def _load(pool: Any, source: RepoSource, local: Path, scratch: Path, runner: Runner) -> None:
    repo = pool.add_repo(source.name)
    _add_repomd(repo, local)
    primary = _repomd_entry(repo, "primary")
    if primary is None:
        raise BuildError(f"repository {source.name}: repomd.xml lists no primary metadata")
    for kind, entry in (("primary", primary), ("filelists", _repomd_entry(repo, "filelists"))):
        if entry is None:
            continue
        href, (algorithm, expected) = entry
        path = _inside(local, href, source)
        if not path.is_file():
            raise BuildError(f"repository {source.name}: {path} is missing")
        if _digest(path, algorithm) != expected:
            raise BuildError(f"repository {source.name}: {path} does not match the "
                             f"{algorithm} checksum in repomd.xml (stale or corrupt metadata)")
        plain = scratch / f"{source.name}-{kind}.xml"
        plain.write_bytes(_decompress(path, runner))
        _add_rpmmd(repo, plain, kind)


def _add_repomd(repo: Any, local: Path) -> None:
    import solv

    handle = solv.xfopen(str(local / "repodata" / "repomd.xml"))
    try:
        if handle is None or not repo.add_repomdxml(handle, 0):
            raise BuildError(f"{local / 'repodata' / 'repomd.xml'}: libsolv cannot read it")
    finally:
        if handle is not None:
            handle.close()


def _add_rpmmd(repo: Any, path: Path, kind: str) -> None:
    import solv

    handle = solv.xfopen(str(path))
    try:
        # Filelists extend the solvables primary created (file dependencies like /bin/sh).
        ok = repo.add_rpmmd(handle, None if kind == "primary" else "FL",
                            0 if kind == "primary" else solv.Repo.REPO_EXTEND_SOLVABLES)
        if not ok:
            raise BuildError(f"repository {repo.name}: libsolv cannot read its {kind} metadata")
    finally:
        handle.close()


def _repomd_entry(repo: Any, kind: str) -> tuple[str, tuple[str, str]] | None:
    """(href, (algorithm, hex)) of one metadata file listed in repomd.xml."""
    import solv

    found = repo.Dataiterator_meta(solv.REPOSITORY_REPOMD_TYPE, kind,
                                   solv.Dataiterator.SEARCH_STRING)
    found.prepend_keyname(solv.REPOSITORY_REPOMD)
    for item in found:
        pos = item.parentpos()
        checksum = pos.lookup_checksum(solv.REPOSITORY_REPOMD_CHECKSUM)
        href = pos.lookup_str(solv.REPOSITORY_REPOMD_LOCATION)
        if checksum is None or href is None:
            raise BuildError(f"repository {repo.name}: repomd.xml {kind} entry lacks a "
                             "location or checksum")
        return href, (checksum.typestr(), checksum.hex())
    return None


def _inside(root: Path, href: str, source: RepoSource) -> Path:
    """Resolve an href from (possibly downloaded) metadata without leaving the repository."""
    path = (root / href).resolve()
    if not path.is_relative_to(root.resolve()):
        raise BuildError(f"repository {source.name}: metadata location {href!r} points outside "
                         "the repository")
    return path


def _digest(path: Path, algorithm: str) -> str:
    if algorithm not in hashlib.algorithms_available:
        raise BuildError(f"{path}: unsupported checksum type {algorithm!r} in repomd.xml")
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, algorithm).hexdigest()


def _decompress(path: Path, runner: Runner) -> bytes:
    data = path.read_bytes()
    if path.suffix == ".gz":
        return gzip.decompress(data)
    if path.suffix == ".bz2":
        return bz2.decompress(data)
    if path.suffix == ".xz":
        return lzma.decompress(data)
    if path.suffix == ".zst":  # createrepo_c >= 1.0 default; no zstd in Python 3.11's stdlib
        return runner.run(["zstd", "-dc", str(path)]).stdout
    return data



def _job(pool: Any, name: str, version: str) -> Any:
    import solv

    if version in ("", "*"):
        return pool.Job(solv.Job.SOLVER_INSTALL | solv.Job.SOLVER_SOLVABLE_NAME,
                        pool.Dep(name).id)
    if GLOB_CHARS.search(version):
        # libsolv globs only names, so match the EVRs here and let it pick one of them.
        matches = [s.id for s in pool.select(name, _name_selection()).solvables()
                   if _evr_matches(s.evr, version)]
        if matches:
            return pool.Job(solv.Job.SOLVER_INSTALL | solv.Job.SOLVER_SOLVABLE_ONE_OF,
                            pool.towhatprovides(matches))
    # name = [epoch:]version[-release]: libsolv compares the EVR as rpm does.
    dep = pool.Dep(name).Rel(solv.REL_EQ, pool.Dep(version))
    return pool.Job(solv.Job.SOLVER_INSTALL | solv.Job.SOLVER_SOLVABLE_NAME, dep.id)


def _explain(pool: Any, problems: Sequence[Any], packages: Sequence[tuple[str, str]],
             arch: str) -> str:
    lines = [f"depsolve failed for {arch}: {len(problems)} problem(s)"]
    for number, problem in enumerate(problems, 1):
        said: list[str] = []
        for rule in problem.findallproblemrules():
            text = rule.info().problemstr()
            if text not in said:
                said.append(text)
        lines.append(f"  problem {number}: " + "; ".join(said or [str(problem)]))
    for name, version in packages:
        available = sorted({s.evr for s in pool.select(name, _name_selection()).solvables()})
        if not available:
            lines.append(f"  {name}: no repository has a package of that name")
        elif version not in ("", "*") and not any(_evr_matches(e, version) for e in available):
            lines.append(f"  {name}: version {version} is not available; "
                         f"the repositories have {', '.join(available)}")
    return "\n".join(lines)


def _name_selection() -> int:
    import solv

    return int(solv.Selection.SELECTION_NAME)


def _evr_matches(evr: str, pattern: str) -> bool:
    """Does a blueprint version (VERSION, VERSION-RELEASE, E:V-R, or a glob of these, as dnf
    reads `name-version`) select this EVR?"""
    without_epoch = evr.rpartition(":")[2]
    candidates = (evr, without_epoch, without_epoch.rpartition("-")[0])
    return any(fnmatch.fnmatchcase(candidate, pattern) for candidate in candidates)


def _locked(solvable: Any) -> LockedPackage:
    import solv

    epoch, _, rest = solvable.evr.rpartition(":")
    version, _, release = rest.rpartition("-")
    checksum = solvable.lookup_checksum(solv.SOLVABLE_CHECKSUM)
    return LockedPackage(
        name=solvable.name, epoch=int(epoch or 0), version=version, release=release,
        arch=solvable.arch, repo=solvable.repo.name,
        location=solvable.lookup_location()[0],
        checksum=f"{checksum.typestr()}:{checksum.hex()}" if checksum else "")
