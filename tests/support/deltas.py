"""Small ostree repositories with a real static delta, made with the ostree CLI (no root).

make_tiny_delta makes one in about two seconds; tiny_delta, scratch_delta and signed_delta
make theirs once (tests/support/cache.py) and copy it, so a test session, or each of the
mutation run's, costs a copy rather than a build."""

from __future__ import annotations

import random
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from builder.core.ostree import delta_dir
from tests.support.cache import cached_copy
from tests.support.keys import make_release_key


@dataclass(frozen=True)
class TinyDelta:
    """An archive repo with commits `old` -> `new`, a delta between them in the repo, and
    the files of the new commit named by what ostree should do with each."""

    repo: Path
    old: str
    new: str

    @property
    def delta(self) -> Path:
        return delta_dir(self.repo, self.old, self.new)

    @property
    def inline(self) -> Path:
        """ostree's own --inline file of that delta (tiny_delta and the like make it)."""
        return self.repo.parent / INLINE


def ostree(repo: Path, *args: str) -> str:
    return subprocess.run(["ostree", f"--repo={repo}", *args], check=True, capture_output=True,
                          text=True).stdout


def _executable(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def make_tiny_delta(root: Path, *generate_args: str) -> TinyDelta:
    """old: bin/tool (3 MB), lib/layer-a/libx.so, etc/motd; new: bin/tool with a small
    insertion (rollsum), libx.so moved to another layer directory and edited in place
    (bsdiff), a new 2 MB random file (whole) and a changed motd."""
    base = _executable(1, 3_000_000)
    lib = _executable(2, 300_000)
    edited_lib = lib[:1000] + b"patched!" + lib[1008:]
    trees = {
        "old": {"usr/bin/tool": base, "usr/lib/layer-a/diff/libx.so.1": lib,
                "usr/etc/motd": b"release 1\n"},
        "new": {"usr/bin/tool": base[:1_500_000] + b"new code" + base[1_500_000:],
                "usr/lib/layer-b/diff/libx.so.1": edited_lib,
                "usr/share/blob.bin": _executable(3, 2_000_000),
                "usr/etc/motd": b"release 2\n"},
    }
    repo = root / "repo"
    repo.mkdir(parents=True)
    subprocess.run(["ostree", f"--repo={repo}", "init", "--mode=archive"], check=True)
    commits = {}
    for day, (name, files) in enumerate(trees.items(), start=1):
        tree = root / name
        for path, data in files.items():
            (tree / path).parent.mkdir(parents=True, exist_ok=True)
            (tree / path).write_bytes(data)
        # Metadata as a composed commit carries it (Repo.commit writes it sorted): another
        # string before `version`.
        commits[name] = ostree(repo, "commit", "--branch=test", f"--tree=dir={tree}",
                               f"--timestamp=2023-01-0{day}T00:00:00Z",
                               "--add-metadata-string=microshift.image=tiny",
                               f"--add-metadata-string=version={day}").strip()
    ostree(repo, "static-delta", "generate", f"--from={commits['old']}",
           f"--to={commits['new']}", *generate_args)
    return TinyDelta(repo, commits["old"], commits["new"])


# --- made once (tests/support/cache.py), copied to each session that asks ----------------

NO_FALLBACK = ("--min-fallback-size=0",)
INLINE = "ostree-inline.delta"  # ostree's own --inline file of the repository's delta
COMMITS = "commits"


def _tiny(root: Path, *generate_args: str) -> None:
    tiny = make_tiny_delta(root, *generate_args)
    ostree(tiny.repo, "static-delta", "generate", f"--from={tiny.old}", f"--to={tiny.new}",
           *generate_args, "--inline", f"--filename={root / INLINE}")
    for tree in ("old", "new"):
        shutil.rmtree(root / tree)
    (root / COMMITS).write_text(f"{tiny.old} {tiny.new}\n")


def _loaded(root: Path) -> TinyDelta:
    old, new = (root / COMMITS).read_text().split()
    return TinyDelta(root / "repo", old, new)


def tiny_delta(dest: Path, *generate_args: str) -> TinyDelta:
    """What make_tiny_delta(dest, *generate_args) makes, with ostree's own --inline file of
    the same delta at dest/INLINE; copied from the cache."""
    return _loaded(cached_copy(dest, _tiny, *generate_args))


def _scratch(root: Path, *generate_args: str) -> None:
    _tiny(root, *generate_args)
    tiny = _loaded(root)
    ostree(tiny.repo, "static-delta", "generate", "--empty", f"--to={tiny.new}",
           *generate_args)


def scratch_delta(dest: Path, *generate_args: str) -> TinyDelta:
    """tiny_delta's repository with a delta from scratch to `new` as well (for a device that
    holds none of the fleet's commits): delta_dir(repo, None, new)."""
    return _loaded(cached_copy(dest, _scratch, *generate_args))


def _signed(root: Path, *generate_args: str) -> None:
    _tiny(root, *generate_args)
    tiny = _loaded(root)
    for name in ("release", "other"):
        # Not under `root`: a GnuPG home's agent socket path must stay under 108 bytes.
        with tempfile.TemporaryDirectory(prefix="tiny-gnupg-") as scratch:
            home = Path(scratch) / name
            fingerprint = make_release_key(home)
            if name == "release":
                ostree(tiny.repo, "gpg-sign", f"--gpg-homedir={home}", tiny.new, fingerprint)
            (root / f"{name}.asc").write_bytes(subprocess.run(
                ["gpg", "--homedir", str(home), "--armor", "--export"], check=True,
                capture_output=True).stdout)
            subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], check=False)
    # The delta and ostree's own file again, now that the commit carries its signature.
    (root / INLINE).unlink()
    ostree(tiny.repo, "static-delta", "generate", f"--from={tiny.old}", f"--to={tiny.new}",
           *generate_args)
    ostree(tiny.repo, "static-delta", "generate", f"--from={tiny.old}", f"--to={tiny.new}",
           *generate_args, "--inline", f"--filename={root / INLINE}")


def signed_delta(dest: Path, *generate_args: str) -> tuple[TinyDelta, Path, Path]:
    """tiny_delta to a commit signed by a release key; that key's and another key's public
    halves (dest/release.asc, dest/other.asc)."""
    root = cached_copy(dest, _signed, *generate_args, tools=("ostree", "gpg"))
    return _loaded(root), root / "release.asc", root / "other.asc"
