"""Thin typed wrappers over the `ostree` command line, all through a Runner.

Only what the compose, delta and verification code needs. Each method is one ostree
invocation; parsing of its output lives next to it so a change of ostree's output format
breaks in one place.
"""

from __future__ import annotations

import base64
import calendar
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from builder.core.children import temporary_gnupg_home, tool_tmpdir
from builder.core.errors import BuildError, ToolError
from builder.core.runner import Runner
from builder.core.signing import SigningKey, export_public_key, gnupg_home

CHECKSUM_RE = re.compile(r"^[0-9a-f]{64}$")
# `ostree ls -R -C` lines: TYPE+MODE UID GID SIZE CHECKSUM [DIRMETA] PATH [-> TARGET]
LS_RE = re.compile(r"^(?P<type>[-dl])(?P<mode>[0-7]+)\s+\d+\s+\d+\s+(?P<size>\d+)\s+"
                   r"(?P<checksum>[0-9a-f]{64})(?:\s+(?P<meta>[0-9a-f]{64}))?\s+(?P<path>/.*)$")


@dataclass(frozen=True)
class TreeFile:
    """A regular file of a commit: path, content object checksum, size and mode."""

    path: str
    checksum: str
    size: int
    mode: int


@dataclass(frozen=True)
class TreeEntry:
    """One path of a commit as `ostree ls -R -C` lists it, in tree order: kind '-' (a regular
    file), 'l' (a symbolic link) or 'd' (a directory); checksum is the content object, for a
    directory its dirtree object (and dirmeta its dirmeta object)."""

    kind: str
    path: str
    checksum: str
    size: int
    mode: int
    dirmeta: str | None = None


def regular_files(entries: Sequence[TreeEntry]) -> list[TreeFile]:
    """The regular files among a commit's entries, in their order."""
    return [TreeFile(e.path, e.checksum, e.size, e.mode) for e in entries if e.kind == "-"]


def repo_mode(path: Path) -> str:
    """The repository's mode as its config names it (`bare` when it names none)."""
    match = re.search(r"^mode\s*=\s*(\S+)", (path / "config").read_text(), re.M)
    return match.group(1) if match else "bare"


@dataclass(frozen=True)
class TreeObjects:
    """Every object a commit's tree references, by kind (the commit object itself excluded)."""

    dirtrees: frozenset[str]
    dirmetas: frozenset[str]
    files: frozenset[str]

    def paths(self, repo: Path) -> Iterator[Path]:
        """Where each object lives in an archive-mode repository."""
        for kind, checksums in (("dirtree", self.dirtrees), ("dirmeta", self.dirmetas),
                                ("filez", self.files)):
            for checksum in sorted(checksums):
                yield object_path(repo, checksum, kind)

    def __sub__(self, other: TreeObjects) -> TreeObjects:
        return TreeObjects(self.dirtrees - other.dirtrees, self.dirmetas - other.dirmetas,
                           self.files - other.files)


def object_path(repo: Path, checksum: str, kind: str) -> Path:
    return repo / "objects" / checksum[:2] / f"{checksum[2:]}.{kind}"


def ostree_timestamp(epoch: int) -> str:
    """`ostree commit --timestamp` wants a date, not a Unix time."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def delta_dir(repo: Path, from_commit: str | None, to_commit: str) -> Path:
    """Where `static-delta generate` puts a delta (ostree's _ostree_get_relative_static_delta_path:
    modified base64 of the binary checksums, '/' replaced by '_', no padding)."""
    def b64(checksum: str) -> str:
        return base64.b64encode(bytes.fromhex(checksum)).decode().rstrip("=").replace("/", "_")

    to_b64 = b64(to_commit)
    if from_commit is None:
        return repo / "deltas" / to_b64[:2] / to_b64[2:]
    from_b64 = b64(from_commit)
    return repo / "deltas" / from_b64[:2] / f"{from_b64[2:]}-{to_b64}"


def commit_signed(runner: Runner, repo: Path, commit: str) -> bool:
    """Whether the commit has GPG signatures (detached metadata ostree.gpgsigs)."""
    proc = runner.run(["ostree", f"--repo={repo}", "show",
                       "--print-detached-metadata-key=ostree.gpgsigs", commit], check=False)
    return proc.returncode == 0


def signed_by(runner: Runner, repo: Path, ref: str, key: Path) -> bool:
    """Whether `key` verifies the commit of `ref`, checked as a device does it: a remote with
    gpg-verify=true and gpgkeypath=KEY, pulling the commit's metadata. ostree verifies in a
    GnuPG home of its own under $TMPDIR: inside a recorded one (children.tool_tmpdir)."""
    with temporary_gnupg_home("ostree-verify-") as scratch:
        check = scratch / "repo"
        check.mkdir()
        runner.output(["ostree", f"--repo={check}", "init", "--mode=archive"])
        runner.output(["ostree", f"--repo={check}", "remote", "add", "--set=gpg-verify=true",
                       f"--set=gpgkeypath={key.resolve()}", "check", f"file://{repo.resolve()}"])
        proc = runner.run(["ostree", f"--repo={check}", "pull", "--commit-metadata-only",
                           "check", ref], env=tool_tmpdir(scratch), check=False)
        return proc.returncode == 0


@dataclass(frozen=True)
class Repo:
    path: Path
    runner: Runner

    def _run(self, *args: str | Path, env: Mapping[str, str] | None = None) -> str:
        return self.runner.output(["ostree", f"--repo={self.path}", *map(str, args)], env=env)

    # --- repository -------------------------------------------------------------------
    def exists(self) -> bool:
        return (self.path / "config").is_file()

    def init(self, mode: str) -> None:
        if self.exists():
            return
        self.path.mkdir(parents=True, exist_ok=True)
        self._run("init", f"--mode={mode}")

    def mode(self) -> str:
        return repo_mode(self.path)

    def fsck(self) -> None:
        self._run("fsck")

    def prune_unreferenced(self) -> None:
        """Delete commits no ref points to, and objects only they used."""
        self._run("prune", "--refs-only", "--depth=0")

    # --- refs and commits -------------------------------------------------------------
    def rev_parse(self, rev: str) -> str | None:
        """The commit a ref points to, or None when the ref does not exist."""
        try:
            return self._run("rev-parse", rev).strip()
        except ToolError as exc:
            if "not found" in exc.stderr or "No such" in exc.stderr:
                return None
            raise

    def has_commit(self, checksum: str) -> bool:
        return (self.path / "objects" / checksum[:2] / f"{checksum[2:]}.commit").is_file()

    def set_ref(self, ref: str, commit: str) -> None:
        """Point `ref` at `commit` (one atomic rename inside ostree)."""
        self._run("refs", "--force", f"--create={ref}", commit)

    def refs(self) -> list[str]:
        return sorted(line for line in self._run("refs").splitlines() if line)

    def commit(self, tree: Path, *, subject: str, timestamp: int, parent: str | None,
               bind_ref: str, metadata: Mapping[str, str], gpg: SigningKey | None = None,
               extra: Sequence[str] = ()) -> str:
        """Commit `tree` without moving any ref (--orphan); returns the checksum.

        The ref binding is recorded so clients pulling by ref accept the commit; the ref
        itself is set by the caller once everything else has succeeded.
        """
        args: list[str] = ["commit", "--orphan", f"--tree=dir={tree}",
                           f"--timestamp={ostree_timestamp(timestamp)}", f"--subject={subject}",
                           f"--bind-ref={bind_ref}", f"--parent={parent or 'none'}", *extra]
        args += [f"--add-metadata-string={key}={value}" for key, value in sorted(metadata.items())]
        if gpg:
            args += gpg.ostree_flags()
        checksum = self._run(*args).strip()
        if not CHECKSUM_RE.match(checksum):
            raise BuildError(f"ostree commit printed {checksum!r}, expected a checksum")
        return checksum

    def pull_local(self, source: Path, rev: str, *, untrusted: bool = True,
                   depth: int | None = None) -> None:
        self._run("pull-local", *(["--untrusted"] if untrusted else []),
                  *([f"--depth={depth}"] if depth is not None else []), source, rev)

    def gpg_sign(self, commit: str, gpg: SigningKey) -> None:
        """Sign once per key: a rerun after a crash between signing and moving the ref keeps
        its own earlier signature (or replaces it) instead of adding a second one."""
        with temporary_gnupg_home("ostree-signed-") as scratch:
            # libostree reads a --gpg-homedir to check existing signatures without following
            # a symlink, which the short alias of a deep build directory's home is
            # (signing.gnupg_home): a commit this key signed already is left as it is.
            public = export_public_key(self.runner, gpg, scratch / "key.asc")
            if signed_by(self.runner, self.path, commit, public):
                return
        home = f"--gpg-homedir={gnupg_home(gpg.homedir)}"
        self.runner.run(["ostree", f"--repo={self.path}", "gpg-sign", "--delete", home, commit,
                         gpg.key_id], check=False)
        self._run("gpg-sign", home, commit, gpg.key_id)

    def summary_update(self, gpg: SigningKey | None = None) -> None:
        self._run("summary", "-u", *(gpg.ostree_flags() if gpg else []))

    def metadata(self, commit: str, key: str) -> str | None:
        """A string metadata value of a commit (GVariant text form unquoted), or None."""
        try:
            value = self._run("show", f"--print-metadata-key={key}", commit).strip()
        except ToolError as exc:
            if "No such metadata key" in exc.stderr:
                return None
            raise
        return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == "'" else value

    def timestamp(self, commit: str) -> int:
        """The commit's timestamp (seconds since the epoch, UTC), as `ostree show` prints it."""
        match = re.search(r"^Date:\s+(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \+0000$",
                          self._run("show", commit), re.M)
        if not match:
            raise BuildError(f"ostree show {commit} printed no UTC date")
        return calendar.timegm(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S"))

    def cat(self, commit: str, path: str) -> bytes | None:
        """A file's content in a commit, or None when the commit has no such file."""
        proc = self.runner.run(["ostree", f"--repo={self.path}", "cat", commit, path],
                               check=False)
        if proc.returncode != 0:
            stderr = proc.stderr.decode(errors="replace")
            if "No such file" in stderr or "not found" in stderr:
                return None
            raise ToolError(["ostree", f"--repo={self.path}", "cat", commit, path],
                            proc.returncode, stderr)
        return proc.stdout

    def list_dir(self, commit: str, path: str) -> list[tuple[str, str]] | None:
        """(type, name) of a directory's entries in a commit (type is '-', 'd' or 'l'), or
        None when the path is not a directory there."""
        proc = self.runner.run(["ostree", f"--repo={self.path}", "ls", commit, path],
                               check=False)
        lines = proc.stdout.decode(errors="replace").splitlines()
        if proc.returncode != 0 or not lines or not lines[0].startswith("d"):
            return None
        entries = []
        for line in lines[1:]:
            words = line.split()
            if len(words) >= 5 and words[4].startswith(path.rstrip("/") + "/"):
                entries.append((words[0][0], words[4].rsplit("/", 1)[1]))
        return entries

    def parent(self, commit: str) -> str | None:
        match = re.search(r"^Parent:\s+([0-9a-f]{64})", self._run("show", commit), re.M)
        return match.group(1) if match else None

    def content_checksum(self, commit: str) -> str:
        """The checksum of the commit's root tree and its metadata (ignores parent, date)."""
        match = re.search(r"^ContentChecksum:\s+([0-9a-f]{64})", self._run("show", commit), re.M)
        if not match:
            raise BuildError(f"ostree show {commit} printed no ContentChecksum")
        return match.group(1)

    def history(self, ref: str, count: int) -> list[str]:
        """The ref's head and up to count-1 ancestors present in this repo, newest first."""
        commits: list[str] = []
        current = self.rev_parse(ref)
        while current and len(commits) < count and self.has_commit(current):
            commits.append(current)
            current = self.parent(current)
        return commits

    def checkout(self, commit: str, dest: Path, *, hardlinks: bool, user_mode: bool) -> None:
        args = ["checkout", *(["-H"] if hardlinks else []), *(["-U"] if user_mode else []),
                commit, str(dest)]
        self._run(*args)

    def entries(self, commit: str) -> list[TreeEntry]:
        """Every path of the commit (`ostree ls -R -C`), in tree order."""
        found: list[TreeEntry] = []
        for line in self._run("ls", "-R", "-C", commit).splitlines():
            match = LS_RE.match(line.strip())
            if not match:
                continue
            kind, path = match.group("type"), match.group("path")
            if kind == "l":
                path = path.split(" -> ", 1)[0]
            found.append(TreeEntry(kind, path, match.group("checksum"), int(match.group("size")),
                                   int(match.group("mode"), 8), match.group("meta")))
        return found

    def tree_objects(self, commit: str) -> TreeObjects:
        """The dirtree, dirmeta and file objects a commit references (via `ostree ls -R -C`)."""
        entries = self.entries(commit)
        return TreeObjects(frozenset(e.checksum for e in entries if e.kind == "d"),
                           frozenset(e.dirmeta for e in entries if e.kind == "d" and e.dirmeta),
                           frozenset(e.checksum for e in entries if e.kind != "d"))

    def files(self, commit: str) -> list[TreeFile]:
        """The commit's regular files (`ostree ls -R -C`), in tree order."""
        return regular_files(self.entries(commit))

    # --- static deltas ----------------------------------------------------------------
    def delta_generate_argv(self, to_commit: str, from_commit: str | None,
                            extra: Sequence[str] = ()) -> list[str]:
        """`static-delta generate` into this repository (deltas/FR/OM-TO/superblock, 0, 1...)."""
        return ["ostree", f"--repo={self.path}", "static-delta", "generate", f"--to={to_commit}",
                f"--from={from_commit}" if from_commit else "--empty", *extra]

    def delta_generate(self, to_commit: str, from_commit: str | None, *,
                       extra: Sequence[str] = ()) -> None:
        self.runner.output(self.delta_generate_argv(to_commit, from_commit, extra))

    def delta_delete(self, from_commit: str | None, to_commit: str) -> None:
        self._run("static-delta", "delete", f"{from_commit}-{to_commit}" if from_commit
                  else to_commit)

    def delta_list(self) -> list[str]:
        return [line.strip() for line in self._run("static-delta", "list").splitlines()
                if line.strip() and "(No static deltas)" not in line]

    def delta_apply_offline(self, delta_file: Path) -> None:
        self._run("static-delta", "apply-offline", delta_file)

    # --- remotes and pulls (device side, tests) ---------------------------------------
    def remote_add(self, name: str, url: str, *, gpg_import: Path | None = None) -> None:
        # --force: the remote is set to exactly this URL, also after a failed earlier attempt.
        args: list[str] = ["remote", "add", "--force"]
        if gpg_import is None:
            self._run(*args, "--no-gpg-verify", name, url)
            return
        args += ["--set=gpg-verify=true", "--set=gpg-verify-summary=true",
                 f"--gpg-import={gpg_import}"]
        with temporary_gnupg_home("ostree-import-") as scratch:  # ostree imports in a home
            self._run(*args, name, url, env=tool_tmpdir(scratch))  # of its own, in $TMPDIR

    def pull(self, remote: str, ref: str) -> str:
        """Pull and return ostree's final statistics line (e.g. '1 delta parts, ...')."""
        proc = self.runner.run(["ostree", f"--repo={self.path}", "pull", remote, ref])
        lines = [line.strip() for line in proc.stdout.decode(errors="replace").splitlines()]
        return next((line for line in reversed(lines) if line), "")
