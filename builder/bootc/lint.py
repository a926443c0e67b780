"""The rules `bootc container lint` applies (bootc lib/src/lints.rs), checked on the image's
paths before a layer is written.

Fatal rules (`var-run`, `etc-usretc`, `bootc-kargs`, `kernel`, `utf8`,
`api-base-directories`, `baseimage-root`) fail the build in one line naming the rule and
the paths; warnings (`baseimage-composefs`, `var-log`, `var-tmpfiles`, `sysusers`,
`nonempty-boot`, `nonempty-run-tmp`, `buildah-injected`) are reported, as bootc reports
them without `--fatal-warnings`.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass

from builder.bootc.tree import PREPARE_ROOT, Node
from builder.core.errors import BuildError

API_DIRS = ("dev", "proc", "sys", "run", "tmp", "var")
KARGS_DIR = "usr/lib/bootc/kargs.d"
TMPFILES_DIRS = ("usr/lib/tmpfiles.d", "etc/tmpfiles.d")
SYSUSERS_DIRS = ("usr/lib/sysusers.d", "etc/sysusers.d")
SHOWN = 5


@dataclass(frozen=True)
class Finding:
    rule: str
    fatal: bool
    message: str

    def text(self) -> str:
        return f"{'Failed lint' if self.fatal else 'Lint warning'}: {self.rule}: {self.message}"


class Tree:
    """The image's paths by name, with the content of the small files lints read."""

    def __init__(self, nodes: list[Node], read: Callable[[Node], bytes]) -> None:
        self.nodes = {node.path: node for node in nodes}
        self.read = read

    def get(self, path: str) -> Node | None:
        return self.nodes.get(path)

    def under(self, directory: str) -> list[Node]:
        prefix = directory + "/"
        return [node for path, node in sorted(self.nodes.items()) if path.startswith(prefix)]

    def text(self, path: str) -> str | None:
        node = self.nodes.get(path)
        if node is None or node.kind != "-":
            return None
        return self.read(node).decode("utf-8", "replace")


def _paths(paths: list[str]) -> str:
    shown = ", ".join("/" + p for p in paths[:SHOWN])
    return shown + (f" (and {len(paths) - SHOWN} more)" if len(paths) > SHOWN else "")


def var_run(tree: Tree) -> str | None:
    node = tree.get("var/run")
    return "Not a symlink: /var/run" if node is not None and node.kind != "l" else None


def etc_usretc(tree: Tree) -> str | None:
    if tree.get("etc") is not None and tree.get("usr/etc") is not None:
        return "Found /usr/etc - this is a bootc implementation detail and not supported " \
               "to use in containers"
    return None


def bootc_kargs(tree: Tree) -> str | None:
    node = tree.get(KARGS_DIR)
    if node is None:
        return None
    if node.kind != "d":
        return f"/{KARGS_DIR} is not a directory"
    for entry in tree.under(KARGS_DIR):
        if entry.kind != "-" or not entry.path.endswith(".toml"):
            continue
        try:
            data = tomllib.loads(tree.text(entry.path) or "")
        except tomllib.TOMLDecodeError as exc:
            return f"/{entry.path}: not TOML ({exc})"
        kargs = data.get("kargs")
        if not isinstance(kargs, list) or not all(isinstance(k, str) for k in kargs):
            return f"/{entry.path}: kargs is not a list of strings"
    return None


def kernel(tree: Tree) -> str | None:
    kernels = sorted({node.path.split("/")[3] for node in tree.under("usr/lib/modules")
                      if node.path.count("/") == 4 and node.path.endswith("/vmlinuz")})
    if len(kernels) > 1:
        return f"Multiple kernels found: {', '.join(kernels)}"
    return None


def utf8(tree: Tree) -> str | None:
    bad = []
    for node in tree.nodes.values():
        for text in (node.path, node.target):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                bad.append(node.path.encode("utf-8", "surrogateescape").decode("utf-8",
                                                                               "replace"))
                break
    return f"Found non-utf8 filenames or link targets: {_paths(sorted(bad))}" if bad else None


def api_base_directories(tree: Tree) -> str | None:
    for name in API_DIRS:
        node = tree.get(name)
        if node is None:
            return f"Missing API filesystem base directory: /{name}"
        if node.kind != "d":
            return f"Expected directory for API filesystem base directory: /{name}"
    return None


def baseimage_root(tree: Tree) -> str | None:
    sysroot, ostree = tree.get("sysroot"), tree.get("ostree")
    if sysroot is None:
        return "Missing /sysroot"
    if sysroot.kind != "d":
        return "Expected a directory for /sysroot"
    if ostree is None:
        return "Missing ostree -> sysroot/ostree link"
    if ostree.kind != "l" or ostree.target != "sysroot/ostree":
        return f"Expected /ostree -> sysroot/ostree, not {ostree.target or ostree.kind}"
    return None


def baseimage_composefs(tree: Tree) -> str | None:
    text = tree.text(PREPARE_ROOT)
    if text is None:
        return f"{PREPARE_ROOT} is not present to enable composefs"
    section = re.search(r"^\[composefs\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    enabled = re.search(r"^\s*enabled\s*=\s*(\S+)", section.group(1), re.M) if section else None
    if enabled is None or enabled.group(1).lower() in ("no", "false", "0"):
        return f"{PREPARE_ROOT} does not have composefs enabled"
    return None


def var_log(tree: Tree) -> str | None:
    logs = [n.path for n in tree.under("var/log") if n.kind == "-" and n.size > 0]
    return f"Found non-empty logfiles: {_paths(logs)}" if logs else None


def var_tmpfiles(tree: Tree) -> str | None:
    declared = tmpfiles_paths(tree)
    missing = [n.path for n in tree.under("var") if "/" + n.path not in declared]
    return (f"Found content in /var missing systemd tmpfiles.d entries: {_paths(missing)}"
            if missing else None)


def tmpfiles_paths(tree: Tree) -> set[str]:
    found = set()
    for directory in TMPFILES_DIRS:
        for node in tree.under(directory):
            for line in (tree.text(node.path) or "").splitlines():
                fields = line.split()
                if len(fields) >= 2 and not fields[0].startswith("#"):
                    found.add(fields[1])
    return found


def sysusers(tree: Tree) -> str | None:
    declared = set()
    for directory in SYSUSERS_DIRS:
        for node in tree.under(directory):
            for line in (tree.text(node.path) or "").splitlines():
                fields = line.split()
                if len(fields) >= 2 and fields[0] in ("u", "u!", "g", "m"):
                    declared.add(fields[1])
    users = [line.split(":")[0] for line in (tree.text("etc/passwd") or "").splitlines()
             if line and not line.startswith("#")]
    missing = [user for user in users if user not in declared and user != "root"]
    return (f"Found /etc/passwd entry without corresponding systemd sysusers.d: "
            f"{', '.join(missing[:SHOWN])}" if missing else None)


def nonempty_boot(tree: Tree) -> str | None:
    if tree.get("boot") is None:
        return "Missing /boot directory"
    entries = [n.path for n in tree.under("boot") if n.path.count("/") == 1]
    return f"Found non-empty /boot: {_paths(entries)}" if entries else None


def nonempty_run_tmp(tree: Tree) -> str | None:
    found = [n.path for name in ("run", "tmp") for n in tree.under(name)]
    return (f"Found content in runtime-only directories (/run, /tmp): {_paths(found)}"
            if found else None)


def buildah_injected(tree: Tree) -> str | None:
    for path in ("etc/hostname", "etc/resolv.conf"):
        node = tree.get(path)
        if node is not None and node.kind == "-" and node.size == 0:
            return f"/{path} is an empty file; this may have been synthesized by a " \
                   "container runtime."
    return None


RULES: tuple[tuple[str, bool, Callable[[Tree], str | None]], ...] = (
    ("api-base-directories", True, api_base_directories),
    ("baseimage-composefs", False, baseimage_composefs),
    ("baseimage-root", True, baseimage_root),
    ("bootc-kargs", True, bootc_kargs),
    ("buildah-injected", False, buildah_injected),
    ("etc-usretc", True, etc_usretc),
    ("kernel", True, kernel),
    ("nonempty-boot", False, nonempty_boot),
    ("nonempty-run-tmp", False, nonempty_run_tmp),
    ("sysusers", False, sysusers),
    ("utf8", True, utf8),
    ("var-log", False, var_log),
    ("var-run", True, var_run),
    ("var-tmpfiles", False, var_tmpfiles),
)


def lint(tree: Tree, image: str) -> list[Finding]:
    """Every rule's finding; raises for the fatal ones, each named with its paths."""
    findings = [Finding(name, fatal, message) for name, fatal, rule in RULES
                if (message := rule(tree)) is not None]
    fatal = [f for f in findings if f.fatal]
    if fatal:
        raise BuildError(f"{image}: bootc container lint: " + "; ".join(f.text() for f in fatal),
                         hint="the image would not install or boot as bootc expects")
    return findings
