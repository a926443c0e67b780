"""SELinux at compose time: what the policy packages' scriptlets would do, done declaratively.

Compose runs no scriptlets. A policy module package's %post (`%selinux_modules_install`)
installs its module into the policy store with semodule and rebuilds the policy; here the
modules that the newly installed packages ship in /usr/share/selinux/packages/POLICY/ are
installed into the tree's own store (`semodule -p TREE`, priority 200 as that macro does)
and the tree's policy is rebuilt, as rpm-ostree's `semodule -nB` and osbuild's stages do.

The commit is then labelled from the tree's own policy (`ostree commit --selinux-policy`),
as rpm-ostree's compose commit does: every file and directory gets a security.selinux
label. /etc is stored as /usr/etc, and a device sees it as /etc, so /usr/etc is labelled
as /etc (rpm-ostree's selinux-label-version 1; ostree 2022.7 has no
--selinux-labeling-epoch, so the same mapping is given to libselinux as a file_contexts.subs
substitution in a scratch copy of the policy root: nothing of it enters the commit).

A base without a policy (or with SELinux disabled) composes unlabelled, with one warning in
the output and in the commit's metadata; a module that does not load is an error.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from builder.context import Context
from builder.core.errors import BuildError, ToolError
from builder.core.selinux import binary_policy, read_config, semodule_install
from builder.core.steps import file_digest

MODULE_PRIORITY = 200  # %selinux_modules_install's default
MODULE_RE = re.compile(r"^/usr/share/selinux/packages/(?P<policy>[^/]+)/(?P<name>[^/]+)"
                       r"\.pp(\.bz2)?$")
# libselinux substitution: look /usr/etc/X up as /etc/X (ostree's SELINUX_LABEL_V1).
USR_ETC_SUBS = "/usr/etc /etc\n"


@dataclass(frozen=True)
class Labelling:
    """How a commit is labelled: with the tree's policy, or not at all (and why)."""

    policy: str | None = None             # SELINUXTYPE
    policy_digest: str | None = None      # sha256 of the binary policy after the rebuild
    modules: tuple[str, ...] = ()         # modules installed by this compose
    warning: str | None = None

    def metadata(self) -> dict[str, str]:
        if self.policy is None:
            return {"microshift.selinux": "unlabelled",
                    "microshift.selinux-warning": self.warning or ""}
        return {"microshift.selinux": "labelled",
                "microshift.selinux-policy": f"{self.policy} sha256:{self.policy_digest}",
                "microshift.selinux-modules": ",".join(self.modules)}


def packaged_modules(files: list[str]) -> list[tuple[str, str]]:
    """(policy, module path on the device) of every module file among package files."""
    found = []
    for path in sorted(files):
        match = MODULE_RE.match(path)
        if match:
            found.append((match.group("policy"), path))
    return found


def tree_policy(tree: Path) -> tuple[str | None, str | None]:
    """(policy name, None) when the tree (with /etc as /etc) labels with a policy, else
    (None, why not) in the words of the warning."""
    config_path = tree / "etc/selinux/config"
    if not config_path.is_file():
        return None, "the base has no SELinux policy (no /etc/selinux/config)"
    config = read_config(config_path)
    if not config.enabled:
        return None, f"the base's /etc/selinux/config says SELINUX={config.mode}"
    if config.name is None:
        return None, "the base's /etc/selinux/config names no SELINUXTYPE"
    root = tree / "etc/selinux" / config.name
    if not (root / "contexts/files/file_contexts").is_file() or binary_policy(root) is None:
        return None, (f"the base's SELinux policy {config.name} has no file_contexts or no "
                      f"binary policy in /etc/selinux/{config.name}")
    return config.name, None


def tree_labelling(tree: Path) -> Labelling:
    """How the tree's policy (with /etc as /etc), as it is, labels the commit."""
    policy, problem = tree_policy(tree)
    if policy is None:
        return Labelling(warning=f"{problem}: the commit is unlabelled")
    binary = binary_policy(tree / "etc/selinux" / policy)
    assert binary is not None  # tree_policy checked it
    return Labelling(policy, file_digest(binary))


def install_policy_modules(ctx: Context, tree: Path, files: list[str]) -> Labelling:
    """Install the modules shipped among `files` into the tree's policy (with /etc as /etc)
    and rebuild it; return how the commit is to be labelled."""
    policy, problem = tree_policy(tree)
    shipped = packaged_modules(files)
    if policy is None:
        skipped = sorted({Path(path).name.split(".")[0] for _, path in shipped})
        also = f"; SELinux modules not installed: {', '.join(skipped)}" if skipped else ""
        return Labelling(warning=f"{problem}: the commit is unlabelled{also}; a device that "
                                 "runs SELinux enforcing needs a full relabel")
    modules = [path for module_policy, path in shipped if module_policy == policy]
    names = tuple(Path(path).name.split(".")[0] for path in modules)
    if modules:
        with ctx.progress.step(f"selinux: install {', '.join(names)} into policy {policy}"):
            _semodule(ctx, tree, policy, modules, names)
    binary = binary_policy(tree / "etc/selinux" / policy)
    assert binary is not None  # tree_policy checked it, semodule rewrote it
    return Labelling(policy, file_digest(binary), names)


def _semodule(ctx: Context, tree: Path, policy: str, modules: list[str],
              names: tuple[str, ...]) -> None:
    final = tree / "etc/selinux/final"
    had_final = final.exists()
    try:
        semodule_install(ctx.runner, tree, policy,
                         [(tree / m.lstrip("/"), MODULE_PRIORITY) for m in modules])
    except ToolError as exc:
        detail = "\n".join("    " + line for line in exc.stderr.strip().splitlines()[-8:])
        raise BuildError(f"SELinux module {', '.join(names)} does not load into the base's "
                         f"policy {policy} (semodule -p):\n{detail}",
                         hint="the module needs types the base's policy lacks (is "
                              "container-selinux's module in the base?), or the base has no "
                              f"module store for {policy} (semanage.conf store-root)") from exc
    if not had_final and final.is_dir() and not any(final.rglob("*")):
        shutil.rmtree(final)  # libsemanage's empty scratch directory


def commit_label_args(labelling: Labelling, tree: Path, scratch: Path) -> list[str]:
    """`ostree commit` options that label the tree (with /etc stored as /usr/etc) from its
    own policy, /usr/etc as /etc; none for an unlabelled commit."""
    if labelling.policy is None:
        return []
    policy = labelling.policy
    source = tree / "usr/etc/selinux" / policy
    root = scratch / "etc/selinux"
    root.mkdir(parents=True)
    (root / "config").write_text(f"SELINUX=enforcing\nSELINUXTYPE={policy}\n")
    files = root / policy / "contexts/files"
    shutil.copytree(source / "contexts/files", files, symlinks=True)
    subs = files / "file_contexts.subs"
    subs.write_text((subs.read_text() if subs.is_file() else "") + USR_ETC_SUBS)
    (root / policy / "policy").symlink_to(source / "policy")
    return [f"--selinux-policy={scratch}"]

