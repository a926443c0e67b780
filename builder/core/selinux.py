"""Thin wrappers over the SELinux policy tools, all through a Runner.

A tree's policy is what its /etc/selinux holds: `config` names the policy (SELINUXTYPE) and
its mode, /etc/selinux/NAME/ the compiled policy (policy/policy.NN) and file contexts
(contexts/files/file_contexts), and the module store that semodule rebuilds them from
(`store-root` in semanage.conf; rpm-ostree moves it from /var/lib/selinux to /etc/selinux).
`semodule -p ROOT` works on such a tree from outside, without booting it, the way osbuild
runs its tools on a tree from the build root.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import BuildError
from builder.core.runner import Runner

DEVEL_MAKEFILE = Path("/usr/share/selinux/devel/Makefile")
POLICY_FILE_RE = re.compile(r"^policy\.(\d+)$")


@dataclass(frozen=True)
class PolicyConfig:
    """What /etc/selinux/config says (ostree and osbuild read only these two keys)."""

    mode: str          # enforcing, permissive or disabled
    name: str | None   # SELINUXTYPE

    @property
    def enabled(self) -> bool:
        return self.mode in ("enforcing", "permissive")


def read_config(path: Path) -> PolicyConfig:
    values: dict[str, str] = {}
    for line in path.read_text(errors="replace").splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and not key.startswith("#"):
            values[key.strip()] = value.strip().strip("\"'")
    return PolicyConfig(values.get("SELINUX", "disabled").lower(),
                        values.get("SELINUXTYPE") or None)


def binary_policy(policy_root: Path) -> Path | None:
    """The newest policy.NN of a policy (what libselinux loads and ostree checksums)."""
    candidates = [(int(m.group(1)), p) for p in (policy_root / "policy").glob("policy.*")
                  if (m := POLICY_FILE_RE.match(p.name)) and p.is_file()]
    return max(candidates)[1] if candidates else None


def semodule_install(runner: Runner, root: Path, policy: str,
                     modules: Sequence[tuple[Path, int]]) -> None:
    """Install (module, priority) pairs into ROOT's store of `policy` in one transaction,
    and rebuild the policy there (-n: load nothing into the running kernel)."""
    argv: list[str | Path] = ["semodule", "-p", root, "-s", policy, "-n"]
    for module, priority in modules:
        argv += ["-X", str(priority), "-i", module]  # -X applies to the operations after it
    runner.run(argv)


def compile_module(runner: Runner, source_dir: Path, name: str, policy: str) -> Path:
    """Compile NAME.te/.fc/.if in source_dir with the policy devel Makefile (the build host's
    policy headers) into NAME.pp.bz2, as a policy package's %build does."""
    if not DEVEL_MAKEFILE.is_file():
        raise BuildError(f"no SELinux policy devel Makefile at {DEVEL_MAKEFILE}",
                         hint="run ci/install-host-tools.sh (selinux-policy-dev on Debian, "
                              "selinux-policy-devel on Fedora/RHEL)")
    # NAME: otherwise the Makefile reads it from the build host's /etc/selinux/config.
    runner.run(["make", "-s", "-f", str(DEVEL_MAKEFILE), f"NAME={policy}", f"{name}.pp"],
               cwd=source_dir, env={"LC_ALL": "C"})
    runner.run(["bzip2", "-9", "-f", f"{name}.pp"], cwd=source_dir)
    return source_dir / f"{name}.pp.bz2"

