"""bootc's lints on hand-made trees: each fatal rule fails the build naming the rule and the
path, each warning is reported, and a tree as bootc wants it passes."""

from __future__ import annotations

import pytest

from builder.bootc.lint import Tree, lint
from builder.bootc.tree import Node
from builder.core.errors import BuildError


def node(path: str, kind: str = "d", **fields: object) -> Node:
    data = fields.pop("data", None)
    if isinstance(data, bytes):
        return Node(path, "-", 0o644, 0, 0, size=len(data), data=data)
    return Node(path, kind, 0o755, 0, 0, **fields)  # type: ignore[arg-type]


GOOD = [node(d) for d in ("boot", "dev", "etc", "proc", "run", "sys", "sysroot", "tmp", "usr",
                          "usr/lib", "usr/lib/modules", "usr/lib/modules/6.1", "var",
                          "usr/lib/ostree")] + [
    node("ostree", "l", target="sysroot/ostree"),
    node("usr/lib/modules/6.1/vmlinuz", data=b"kernel"),
    node("usr/lib/ostree/prepare-root.conf", data=b"[composefs]\nenabled = yes\n")]


def run(nodes: list[Node]) -> list[str]:
    return [f.text() for f in lint(Tree(nodes, lambda n: n.data or b""), "test-image")]


def test_a_tree_as_bootc_wants_it_passes_without_warnings() -> None:
    assert run(GOOD) == []


@pytest.mark.parametrize(("change", "words"), [
    ([node("var/run")], "var-run: Not a symlink: /var/run"),
    ([node("usr/etc")], "etc-usretc: Found /usr/etc"),
    ([node("usr/lib/modules/6.2"), node("usr/lib/modules/6.2/vmlinuz", data=b"k")],
     "kernel: Multiple kernels found: 6.1, 6.2"),
    ([node("usr/lib/bootc"), node("usr/lib/bootc/kargs.d", data=b"not a directory")],
     "bootc-kargs: /usr/lib/bootc/kargs.d is not a directory"),
    ([node("usr/lib/bootc"), node("usr/lib/bootc/kargs.d"),
      node("usr/lib/bootc/kargs.d/10.toml", data=b"kargs = 'console=ttyS0'\n")],
     "bootc-kargs: /usr/lib/bootc/kargs.d/10.toml: kargs is not a list of strings"),
    ([node("bad\udcffname")], "utf8: Found non-utf8 filenames"),
])
def test_a_fatal_rule_fails_the_build_naming_rule_and_path(change: list[Node],
                                                            words: str) -> None:
    with pytest.raises(BuildError) as caught:
        run(GOOD + change)
    assert str(caught.value).startswith("test-image: bootc container lint: Failed lint: ")
    assert words in str(caught.value)


@pytest.mark.parametrize(("drop", "words"), [
    ("proc", "api-base-directories: Missing API filesystem base directory: /proc"),
    ("sysroot", "baseimage-root: Missing /sysroot"),
    ("ostree", "baseimage-root: Missing ostree -> sysroot/ostree link"),
])
def test_a_missing_base_directory_is_fatal(drop: str, words: str) -> None:
    with pytest.raises(BuildError, match=words):
        run([n for n in GOOD if n.path != drop])


@pytest.mark.parametrize(("change", "words"), [
    ([node("var/log"), node("var/log/boot.log", data=b"x")],
     "var-log: Found non-empty logfiles: /var/log/boot.log"),
    ([node("var/lib")], "var-tmpfiles: Found content in /var missing systemd tmpfiles.d "
                        "entries: /var/lib"),
    ([node("boot/vmlinuz", data=b"k")], "nonempty-boot: Found non-empty /boot: /boot/vmlinuz"),
    ([node("tmp/x", data=b"x")], "nonempty-run-tmp: Found content in runtime-only"),
    ([node("etc/hostname", data=b"")], "buildah-injected: /etc/hostname is an empty file"),
    ([node("etc/passwd", data=b"root:x:0:0::/root:/bin/bash\nmicroshift:x:9:9::/:/bin/sh\n")],
     "sysusers: Found /etc/passwd entry without corresponding systemd sysusers.d: microshift"),
])
def test_a_warning_is_reported_not_fatal(change: list[Node], words: str) -> None:
    found = run(GOOD + change)
    assert any(words in line and line.startswith("Lint warning: ") for line in found), found


def test_var_content_declared_in_tmpfiles_is_no_warning() -> None:
    tmpfiles = node("usr/lib/tmpfiles.d/x.conf", data=b"d /var/lib 0755 0 0 - -\n")
    assert run([*GOOD, node("usr/lib/tmpfiles.d"), node("var/lib"), tmpfiles]) == []


def test_composefs_off_is_a_warning() -> None:
    off = [n for n in GOOD if n.path != "usr/lib/ostree/prepare-root.conf"] + [
        node("usr/lib/ostree/prepare-root.conf", data=b"[composefs]\nenabled = no\n")]
    assert run(off) == ["Lint warning: baseimage-composefs: usr/lib/ostree/prepare-root.conf "
                        "does not have composefs enabled"]
