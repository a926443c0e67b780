"""Static deltas for a ref, offline delta files for USB delivery, and what each update costs.

For the head H of a ref this generates `ostree static-delta generate --from P --to H` for
each of the previous N commits P (N = release.yaml ostree.deltas_from, default 3) and
`--empty --to H` for devices installing from scratch, then regenerates the summary (which
also rewrites the delta indexes clients look deltas up in).

The report compares, per update path, what a device downloads:
  delta        superblock + parts + fallback objects (objects ostree sends whole);
  object pull  the archive objects new in H and not in P (what a pull without deltas
               fetches, one HTTP request each) plus the commit object and its signature;
  full commit  every object of H (a fresh pull).
and the time each takes at 5 and 10 Mbit/s (payload only: no TLS or HTTP overhead), and
what each update from a previous commit changes (builder/publish/changes.py).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from builder.context import Context
from builder.core.errors import BuildError
from builder.core.ostree import Repo, TreeObjects, delta_dir, object_path, signed_by
from builder.core.progress import human_bytes
from builder.core.runner import Runner
from builder.core.signing import SigningKey, stop_agent
from builder.core.steps import write_atomic
from builder.publish.changes import CommitChanges, changes_to

LINK_SPEEDS_MBIT = (5, 10)
OFFLINE_SUFFIX = ".delta"


@dataclass(frozen=True)
class DeltaOptions:
    ref: str | None = None
    image: str = "microshift-full"
    from_count: int | None = None
    key: SigningKey | None = None
    offline: bool = True
    # ostree static-delta generate knobs (MB); None keeps ostree's defaults (fallback for
    # new objects over 4 MB, bsdiff for files up to 128 MB). Benchmarks vary these.
    min_fallback_size_mb: int | None = None
    max_bsdiff_size_mb: int | None = None

    def generate_args(self) -> list[str]:
        args = []
        if self.min_fallback_size_mb is not None:
            args.append(f"--min-fallback-size={self.min_fallback_size_mb}")
        if self.max_bsdiff_size_mb is not None:
            args.append(f"--max-bsdiff-size={self.max_bsdiff_size_mb}")
        return args


@dataclass(frozen=True)
class UpdatePath:
    from_commit: str | None  # None: from scratch
    from_version: str | None
    delta_bytes: int
    delta_parts: int
    fallback_objects: int
    object_pull_bytes: int
    object_pull_count: int
    full_bytes: int
    offline_file: str | None
    seconds: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class DeltaReport:
    ref: str
    to_commit: str
    to_version: str | None
    repo: str
    paths: tuple[UpdatePath, ...]
    # What each update path from a previous commit changes (packages, images).
    changes: tuple[CommitChanges, ...] = ()

    def to_json(self) -> str:
        data = asdict(self)
        data["changes"] = [change.to_dict() for change in self.changes]
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    def text(self) -> str:
        lines = [f"Update paths to {self.ref} = {self.to_commit[:12]} "
                 f"(version {self.to_version or '?'}) in {self.repo}",
                 f"{'from':<28}{'delta':>12}{'object pull':>14}{'full commit':>14}"
                 + "".join(f"{f'delta@{s}Mbit':>14}{f'pull@{s}Mbit':>13}"
                           for s in LINK_SPEEDS_MBIT)]
        for path in self.paths:
            origin = (f"{path.from_version or '?'} ({path.from_commit[:12]})"
                      if path.from_commit else "scratch (--empty)")
            row = (f"{origin:<28}{human_bytes(path.delta_bytes):>12}"
                   f"{human_bytes(path.object_pull_bytes):>14}{human_bytes(path.full_bytes):>14}")
            for speed in LINK_SPEEDS_MBIT:
                times = path.seconds[f"{speed}mbit"]
                row += f"{_secs(times['delta']):>14}{_secs(times['object_pull']):>13}"
            lines.append(row)
        lines += [change.text() for change in self.changes]
        return "\n".join(lines)


def _secs(seconds: float) -> str:
    return f"{seconds:.2f}s" if seconds < 10 else f"{seconds:.0f}s"


def transfer_seconds(size: int, mbit: int) -> float:
    return size * 8 / (mbit * 1_000_000)


def report_dir(build_dir: Path, ref: str) -> Path:
    """DIR/deltas/REF/: one ref's report and offline files, apart from other images' refs.

    ostree ref components start with a letter, digit or '_', so a ref is a safe sub-path."""
    return build_dir / "deltas" / ref


def resolve_ref(ctx: Context, options: DeltaOptions) -> str:
    if options.ref:
        return options.ref
    from builder.compose.commit import image_ref

    return image_ref(ctx, options.image)


def generate_deltas(ctx: Context, options: DeltaOptions | None = None) -> DeltaReport:
    """Generate, publish and measure the deltas to the ref's head (a library entry point)."""
    options = options or DeltaOptions()
    repo = Repo(ctx.path("ostree", "repo"), ctx.runner)
    if not repo.exists():
        raise BuildError(f"no ostree repository at {repo.path}",
                         hint="run `python -m builder compose` first")
    ref = resolve_ref(ctx, options)
    count = ctx.release.ostree.deltas_from if options.from_count is None else options.from_count
    history = repo.history(ref, count + 1)
    if not history:
        raise BuildError(f"{repo.path} has no ref {ref}", hint="compose the image first")
    head, previous = history[0], history[1:]
    out_dir = report_dir(ctx.build_dir, ref)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: list[UpdatePath] = []
    with ctx.progress.step(f"static deltas to {ref} = {head[:12]} from "
                           f"{len(previous)} previous commits and from scratch"):
        for source in [*previous, None]:
            # -n: an existing delta between two fixed commits is still exact; keep it.
            repo.delta_generate(head, source, extra=["-n", *options.generate_args()])
            offline = (_offline_file(repo, out_dir, source, head, options.generate_args())
                       if options.offline else None)
            paths.append(measure_update(repo, source, head, offline))
        try:
            repo.summary_update(options.key)
        finally:
            if options.key is not None:
                stop_agent(ctx.runner, options.key.homedir)
        _remove_stale_offline(out_dir, {p.offline_file for p in paths if p.offline_file})
    report = DeltaReport(ref, head, repo.metadata(head, "version"), str(repo.path), tuple(paths),
                         changes_to(repo, head, previous, ctx.progress.info))
    write_atomic(out_dir / "report.json", report.to_json())
    write_atomic(out_dir / "report.txt", report.text() + "\n")
    ctx.progress.wrote(str(out_dir / "report.json"), (out_dir / "report.json").stat().st_size)
    return report


def _offline_file(repo: Repo, out_dir: Path, source: str | None, head: str,
                  extra: list[str]) -> str:
    name = f"{source or 'empty'}-{head}{OFFLINE_SUFFIX}"
    target = out_dir / name
    if not target.is_file():
        tmp = out_dir / f".{name}.tmp"
        tmp.unlink(missing_ok=True)
        repo.delta_generate(head, source, filename=tmp, extra=extra)
        os.replace(tmp, target)
    return name


def _remove_stale_offline(out_dir: Path, keep: set[str]) -> None:
    """Offline files to an older head are superseded: a USB stick gets the current set."""
    for path in out_dir.glob(f"*{OFFLINE_SUFFIX}"):
        if path.name not in keep:
            path.unlink()


def delta_sizes(repo: Repo, source: str | None, head: str) -> tuple[int, int, int]:
    """(bytes on the wire, number of parts, number of fallback objects) of a repo delta."""
    directory = delta_dir(repo.path, source, head)
    if not (directory / "superblock").is_file():
        raise BuildError(f"delta {source or 'empty'} -> {head} is not in {repo.path}")
    files = sum(p.stat().st_size for p in directory.iterdir() if p.is_file())
    parts = sum(1 for p in directory.iterdir() if p.name.isdigit())
    name = f"{source}-{head}" if source else head
    shown = repo.runner.output(["ostree", f"--repo={repo.path}", "static-delta", "show", name])
    fallback_bytes = _show_int(shown, "Total Fallback Size")
    fallback_count = _show_int(shown, "Number of fallback entries")
    return files + fallback_bytes, parts, fallback_count


def _show_int(text: str, label: str) -> int:
    match = re.search(rf"^{re.escape(label)}:\s*(\d+)", text, re.M)
    return int(match.group(1)) if match else 0


def commit_bytes(repo: Repo, commit: str) -> int:
    """The commit object and its detached metadata (signatures), as fetched by a pull."""
    return sum(path.stat().st_size for kind in ("commit", "commitmeta")
               if (path := object_path(repo.path, commit, kind)).is_file())


def objects_bytes(repo: Repo, objects: TreeObjects) -> tuple[int, int]:
    sizes = [path.stat().st_size for path in objects.paths(repo.path) if path.is_file()]
    return sum(sizes), len(sizes)


def measure_update(repo: Repo, source: str | None, head: str,
                   offline_file: str | None = None) -> UpdatePath:
    """Sizes of one update path; usable on any archive repo (benchmarks call this)."""
    delta, parts, fallback = delta_sizes(repo, source, head)
    new_objects = repo.tree_objects(head)
    full, full_count = objects_bytes(repo, new_objects)
    full += commit_bytes(repo, head)
    if source is None:
        pull, pull_count = full, full_count + 1
    else:
        pull, pull_count = objects_bytes(repo, new_objects - repo.tree_objects(source))
        pull += commit_bytes(repo, head)
        pull_count += 1
    seconds = {f"{s}mbit": {"delta": round(transfer_seconds(delta, s), 3),
                            "object_pull": round(transfer_seconds(pull, s), 3),
                            "full": round(transfer_seconds(full, s), 3)}
               for s in LINK_SPEEDS_MBIT}
    return UpdatePath(source, repo.metadata(source, "version") if source else None, delta,
                      parts, fallback, pull, pull_count, full, offline_file, seconds)


def apply_offline(runner: Runner, repo_path: Path, delta_file: Path,
                  verify_remote: str | None = None) -> str:
    """Apply a `deltas` offline file to a device repo; returns the commit it delivered.

    With `verify_remote`, the delivered commit's GPG signature (which the delta carries) must
    verify with that remote's keys, as a pull with gpg-verify=true would require: a USB stick
    is no more trusted than the network."""
    if not delta_file.is_file():
        raise BuildError(f"{delta_file} does not exist")
    match = re.fullmatch(rf"(?:[0-9a-f]{{64}}|empty)-([0-9a-f]{{64}}){re.escape(OFFLINE_SUFFIX)}",
                         delta_file.name)
    if match is None:
        raise BuildError(f"{delta_file.name}: not an offline delta written by `deltas` "
                         f"(FROM-TO{OFFLINE_SUFFIX})")
    repo = Repo(repo_path, runner)
    if not repo.exists():
        raise BuildError(f"{repo_path} is not an ostree repository")
    repo.delta_apply_offline(delta_file)
    commit = match.group(1)
    if not repo.has_commit(commit):
        raise BuildError(f"after applying {delta_file.name}, {repo_path} lacks commit {commit}")
    if verify_remote is not None:
        keys = _remote_keys(runner, repo_path, verify_remote)
        # `ostree show --gpg-verify-remote` only prints its verdict; a pull of the commit's
        # metadata with gpg-verify=true fails on a bad signature, as a device's pull would.
        if not signed_by(runner, repo_path, commit, keys):
            raise BuildError(
                f"{delta_file.name}: commit {commit[:12]} does not verify with the keys of "
                f"remote {verify_remote!r}",
                hint="do not deploy it; its objects stay unreferenced and `ostree prune` "
                     "removes them")
    return commit


def _remote_keys(runner: Runner, repo_path: Path, remote: str) -> Path:
    """The keyring a remote verifies with: its gpgkeypath, or what --gpg-import stored."""
    configured = runner.run(["ostree", f"--repo={repo_path}", "config", "get",
                             f"--group=remote \"{remote}\"", "gpgkeypath"], check=False)
    path = configured.stdout.decode().strip()
    if configured.returncode == 0 and path:
        return Path(path)
    imported = repo_path / f"{remote}.trustedkeys.gpg"
    if imported.is_file():
        return imported
    raise BuildError(f"remote {remote!r} of {repo_path} has no GPG keys to verify with",
                     hint="add the remote with --gpg-import=KEY.asc")

