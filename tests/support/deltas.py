"""Small ostree repositories with a real static delta, made with the ostree CLI (no root)."""

from __future__ import annotations

import random
import subprocess
from dataclasses import dataclass
from pathlib import Path

from builder.core.ostree import delta_dir


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
        commits[name] = ostree(repo, "commit", "--branch=test", f"--tree=dir={tree}",
                               f"--timestamp=2023-01-0{day}T00:00:00Z",
                               f"--add-metadata-string=version={day}").strip()
    ostree(repo, "static-delta", "generate", f"--from={commits['old']}",
           f"--to={commits['new']}", *generate_args)
    return TinyDelta(repo, commits["old"], commits["new"])
