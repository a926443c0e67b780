"""Helpers for the SELinux tests: the module's file contexts, a commit's labels, libselinux
lookups in a commit's own policy."""

from __future__ import annotations

import re
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.support.cli import PROJECT_ROOT

MODULE_FC = PROJECT_ROOT / "specs/sources/microshift-selinux/selinux/microshift.fc"
GEN_CONTEXT = re.compile(r"^gen_context\((?P<context>[^,]+),(?P<level>[^)]+)\)$")
# `ostree ls -R -X` lines: TYPE+MODE UID GID SIZE { XATTRS } PATH [-> TARGET]
LS_XATTRS = re.compile(r"^(?P<type>[-dl])[0-7]+\s+\d+\s+\d+\s+\d+\s+\{ (?P<xattrs>.*) \}\s+"
                       r"(?P<path>/\S*)")
SELINUX_XATTR = re.compile(r"\(b'security\.selinux', b'(?P<label>[^'\\]*)(?:\\x00)?'\)")
FILE_TYPES = {"--": "-", "-d": "d", "-l": "l"}


@dataclass(frozen=True)
class FcEntry:
    regex: str
    kind: str | None   # "-" regular file, "d" directory, "l" symlink, None any
    context: str

    def matches(self, path: str, kind: str) -> bool:
        return re.fullmatch(self.regex, path) is not None and self.kind in (None, kind)

    @property
    def example(self) -> str:
        """A path the entry is written for: the regex without its (/.*)? tail."""
        return self.regex.removesuffix("(/.*)?").replace("\\.", ".")

    @property
    def mode(self) -> int:
        return stat.S_IFDIR if self.kind == "d" or self.regex.endswith("(/.*)?") \
            else stat.S_IFREG


def module_file_contexts(path: Path = MODULE_FC) -> list[FcEntry]:
    entries = []
    for line in path.read_text().splitlines():
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        kind = FILE_TYPES[fields[1]] if len(fields) == 3 else None
        match = GEN_CONTEXT.match(fields[-1])
        assert match, line
        entries.append(FcEntry(fields[0], kind, f"{match['context']}:{match['level']}"))
    return entries


@dataclass(frozen=True)
class Labelled:
    kind: str
    label: str | None


def commit_labels(repo: Path, commit: str) -> dict[str, Labelled]:
    """Every path of a commit with its type and security.selinux label (None: unlabelled)."""
    out = subprocess.run(["ostree", f"--repo={repo}", "ls", "-R", "-X", commit],
                         capture_output=True, text=True, check=True).stdout
    labels = {}
    for line in out.splitlines():
        match = LS_XATTRS.match(line.strip())
        assert match, line
        label = SELINUX_XATTR.search(match["xattrs"])
        labels[match["path"]] = Labelled(match["type"], label["label"] if label else None)
    return labels


def lookup(file_contexts: Path, path: str, mode: int) -> str:
    """The context libselinux gives `path` under these file contexts."""
    out = subprocess.run(["selabel_lookup", "-b", "file", "-k", path, "-t", str(mode), "-f",
                          str(file_contexts)], capture_output=True, text=True, check=True).stdout
    return out.strip().removeprefix("Default context: ")
