"""SAMPLE SELinux policy packages for the SAMPLE base, so the sample flow labels end to end.

RHEL for Edge bases carry selinux-policy-targeted (the compiled policy, its file contexts
and the module store that semodule rebuilds them from), container-selinux (the container
types MicroShift's module uses) and policycoreutils. Their SAMPLE stand-ins, built here:

- selinux-policy-targeted (SAMPLE): a policy named `targeted`, built with the real
  `semodule` from Debian's reference policy modules (selinux-policy-default), with its store
  in /etc/selinux (where rpm-ostree keeps it on edge commits: store-root=/etc/selinux);
- container-selinux (SAMPLE): a module compiled here with the policy devel Makefile that
  declares, under container-selinux's names, the types MicroShift's module labels with
  (kubelet_exec_t, kubernetes_file_t, container_var_lib_t); it ships the module file, and
  the SAMPLE store has it loaded at priority 200 already, as a base commit has it after the
  package's %post (one policy build less for every SAMPLE base);
- policycoreutils (SAMPLE): a static /usr/sbin/semodule that only prints a usage text
  without --refresh, so that a simulated device's ostree can run it on upgrade
  (builder/rpm/sample_elf.py).

When the reference policy modules are not installed (hosts other than Debian), the stand-ins
ship no policy and the sample flow composes unlabelled, with a warning.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from builder.context import Context
from builder.core.diskspace import MiB
from builder.core.selinux import compile_module, semodule_install
from builder.core.steps import Step, file_digest, is_built, materialize
from builder.rpm.rpmbuild import build_spec, rpm_macros
from builder.rpm.sample_elf import print_and_exit
from builder.rpm.stand_in import SAMPLE_VERSION, StandIn, write_spec

REFPOLICY_DIR = Path("/usr/share/selinux/default")  # Debian's selinux-policy-default
# base: the reference policy's kernel and system layers. The others are what base itself
# needs: its seusers maps the sddm login to xserver's `xdm` SELinux user, and xserver
# requires xdg's attributes and getty's types. A small policy keeps each compose's policy
# rebuild at about a second (the whole reference policy takes half a minute).
REFPOLICY_MODULES = ("base", "getty", "unconfined", "xdg", "xserver")
POLICY = "targeted"  # RHEL's name: packages built for RHEL install into this store
MODULES_DIR = f"/usr/share/selinux/packages/{POLICY}"
# Bump when the files below change: part of the SAMPLE policy's identity.
POLICY_LAYOUT = 1

CONFIG = f"""\
# SAMPLE SELinux configuration (microshift-edge-builder's SAMPLE base), as on RHEL for Edge.
SELINUX=enforcing
SELINUXTYPE={POLICY}
"""
# usepasswd/genhomedircon off: home directory contexts would come from the build host's
# users. sefcontext_compile -r: file_contexts.bin without compiled regexes, which are not
# portable between PCRE2 builds.
SEMANAGE_CONF = """\
# SAMPLE semanage.conf (microshift-edge-builder's SAMPLE base).
module-store = direct
expand-check = 0
usepasswd = False
disable-genhomedircon = true
store-root = /etc/selinux
[sefcontext_compile]
path = /usr/sbin/sefcontext_compile
args = -r $@
[end]
"""
SEMODULE_USAGE = """\
usage: semodule (SAMPLE stand-in for policycoreutils' semodule, built by
microshift-edge-builder: it manages no policy and offers no options)
"""
CONTAINER_TE = """\
policy_module(container, 2.999.0)

# SAMPLE stand-in for container-selinux, built by microshift-edge-builder for the SAMPLE
# base. It declares, under container-selinux's names, the container types MicroShift's
# policy module uses, with the same kinds (domains, entry points, files) and the basic
# access of the runtime and the kubelet to them; it is not the real policy.

type container_runtime_t;
type container_runtime_exec_t;
init_daemon_domain(container_runtime_t, container_runtime_exec_t)

type kubelet_t;
type kubelet_exec_t;
init_daemon_domain(kubelet_t, kubelet_exec_t)

# A confined container: it is given nothing on the host's files.
type container_t;
domain_type(container_t)
role system_r types container_t;

type container_var_lib_t;
files_type(container_var_lib_t)
type kubernetes_file_t;
files_config_file(kubernetes_file_t)

manage_dirs_pattern({ container_runtime_t kubelet_t }, container_var_lib_t, container_var_lib_t)
manage_files_pattern({ container_runtime_t kubelet_t }, container_var_lib_t, container_var_lib_t)
read_files_pattern({ container_runtime_t kubelet_t }, kubernetes_file_t, kubernetes_file_t)
files_var_lib_filetrans(container_runtime_t, container_var_lib_t, dir, "containers")

optional_policy(`
\tunconfined_domain(kubelet_t)
')
"""
CONTAINER_FC = """\
# SAMPLE stand-in for container-selinux's file contexts.
/usr/bin/crio\t\t--\tgen_context(system_u:object_r:container_runtime_exec_t,s0)
/usr/bin/kubelet\t--\tgen_context(system_u:object_r:kubelet_exec_t,s0)
/etc/kubernetes(/.*)?\t\tgen_context(system_u:object_r:kubernetes_file_t,s0)
/var/lib/containers(/.*)?\tgen_context(system_u:object_r:container_var_lib_t,s0)
"""


def refpolicy_modules() -> list[Path] | None:
    """The reference policy modules the SAMPLE policy is built from, or None."""
    paths = [REFPOLICY_DIR / f"{name}.pp.bz2" for name in REFPOLICY_MODULES]
    return paths if all(p.is_file() for p in paths) else None


def policy_stand_ins(ctx: Context, arch: str) -> list[Path]:
    """Build the SAMPLE policy stand-in RPMs (each a cached step); return their paths."""
    modules = refpolicy_modules()
    if modules is None:
        ctx.progress.info(f"SAMPLE base without an SELinux policy: Debian's reference policy "
                          f"modules are not in {REFPOLICY_DIR} (selinux-policy-default); "
                          "images of this base are composed unlabelled")
    policy = _sample_policy(ctx, modules) if modules else None
    stand_ins = [
        StandIn("policycoreutils", files={
            "/usr/share/doc/policycoreutils-sample/README":
                _text("policycoreutils (semodule, restorecon)"),
            "/usr/sbin/semodule": print_and_exit(arch, SEMODULE_USAGE)},
            executables=("/usr/sbin/semodule",)),
        StandIn("selinux-policy-targeted", provides=("selinux-policy",),
                files=_policy_files(policy) if policy else {
                    "/usr/share/doc/selinux-policy-sample/README": _text("selinux-policy")}),
        StandIn("container-selinux", requires=("selinux-policy-targeted",),
                files={f"{MODULES_DIR}/container.pp.bz2":
                       (policy / "container.pp.bz2").read_bytes()} if policy else {
                    "/usr/share/doc/container-selinux-sample/README": _text("container-selinux")}),
    ]
    return [rpm for stand_in in stand_ins for rpm in _build(ctx, stand_in, arch)]


def _text(what: str) -> str:
    return f"SAMPLE stand-in for {what}; built by microshift-edge-builder, not the real package.\n"


def policy_space(ctx: Context) -> int:
    """What building the SAMPLE policy writes at its peak when it is not built yet: the store
    and its semodule transaction copy, then the policy package's rpmbuild tree (about 2 MiB
    each, measured), with room to spare."""
    modules = refpolicy_modules()
    if modules is None or is_built(_policy_step(modules), ctx.build_dir):
        return 0
    return 8 * MiB


def _policy_step(modules: list[Path]) -> Step:
    return Step("sample-selinux-policy", {
        "modules": {p.name: file_digest(p) for p in modules}, "container_te": CONTAINER_TE,
        "container_fc": CONTAINER_FC, "config": CONFIG, "semanage_conf": SEMANAGE_CONF,
        "layout": POLICY_LAYOUT})


def _sample_policy(ctx: Context, modules: list[Path]) -> Path:
    """The SAMPLE policy tree (root/etc/selinux) and container module, as a cached step."""
    step = _policy_step(modules)

    def produce(out: Path) -> None:
        source = out / "container-src"
        source.mkdir()
        (source / "container.te").write_text(CONTAINER_TE)
        (source / "container.fc").write_text(CONTAINER_FC)
        (source / "container.if").write_text("## <summary>SAMPLE stand-in.</summary>\n")
        module = compile_module(ctx.runner, source, "container", POLICY)
        module.rename(out / "container.pp.bz2")
        shutil.rmtree(source)
        etc = out / "root/etc/selinux"
        etc.mkdir(parents=True)
        (etc / "config").write_text(CONFIG)
        (etc / "semanage.conf").write_text(SEMANAGE_CONF)
        # The reference policy at the distribution's priority, container-selinux's at the
        # packages' (%selinux_modules_install), in one transaction.
        semodule_install(ctx.runner, out / "root", POLICY,
                         [*((m, 100) for m in modules), (out / "container.pp.bz2", 200)])
        # semodule's scratch directory and lock files are not part of a shipped policy.
        shutil.rmtree(etc / "final", ignore_errors=True)
        for lock in (etc / POLICY).glob("semanage.*.LOCK"):
            lock.unlink()

    with ctx.progress.step(f"SAMPLE SELinux policy from the reference policy "
                           f"({', '.join(REFPOLICY_MODULES)})"):
        out, _ = materialize(step, ctx.build_dir, produce, ctx.progress)
    return out


def _policy_files(policy: Path) -> dict[str, str | bytes]:
    root = policy / "root"
    return {"/" + path.relative_to(root).as_posix(): path.read_bytes()
            for path in sorted(root.rglob("*")) if path.is_file()}


def _build(ctx: Context, stand_in: StandIn, arch: str) -> list[Path]:
    epoch = ctx.release.source_date_epoch
    step = Step(f"sample-rpm:{stand_in.name}.{arch}", {
        "stand_in": {"name": stand_in.name, "provides": stand_in.provides,
                     "requires": stand_in.requires, "dirs": stand_in.dirs,
                     "executables": stand_in.executables,
                     "files": {path: _digest(content)
                               for path, content in stand_in.files.items()}},
        "version": SAMPLE_VERSION, "arch": arch, "macros": rpm_macros(epoch)})

    def produce(out: Path) -> None:
        topdir = out / "topdir"
        spec = write_spec(stand_in, arch, topdir)
        for rpm in build_spec(ctx.runner, spec, topdir, arch, epoch):
            rpm.rename(out / rpm.name)
        shutil.rmtree(topdir)

    out, _ = materialize(step, ctx.build_dir, produce, ctx.progress)
    return sorted(out.glob("*.rpm"))


def _digest(content: str | bytes) -> str:
    import hashlib

    return hashlib.sha256(content.encode() if isinstance(content, str) else content).hexdigest()
