"""SAMPLE base OS repository: deterministic stand-ins for the runtime MicroShift needs.

cri-o, openvswitch, NetworkManager, greenboot, systemd, a kernel and friends are not
available offline, so this builds small stand-in RPMs with rpmfluff (spec generation) and
rpmbuild (through the Runner, with the reproducibility macros). Every package says SAMPLE in
its summary and description. Production points release.yaml `base.repos` at real RHEL repos.
"""

from __future__ import annotations

from pathlib import Path

from builder.context import Context
from builder.core.diskspace import MiB, ensure_space
from builder.core.steps import Step, file_digest, is_built, link_files, materialize, publish
from builder.rpm.repos import publish_arch_repos
from builder.rpm.rpmbuild import build_spec, rpm_macros
from builder.rpm.sample_policy import policy_space, policy_stand_ins
from builder.rpm.stand_in import SAMPLE_VERSION, StandIn, write_spec
from builder.rpm.stand_in import stand_in_text as _text

KERNEL_VERSION = "5.14.0-284.sample.el9"

OS_RELEASE = """NAME="Sample Edge OS"
VERSION="9.2 (SAMPLE)"
ID="sample-edge"
ID_LIKE="rhel fedora"
VERSION_ID="9.2"
PRETTY_NAME="Sample Edge OS 9.2 (SAMPLE stand-in for RHEL for Edge)"
# Built by microshift-edge-builder for offline demos and tests.
"""


# Sonames and symbol versions of RHEL 9's core libraries (glibc 2.34, libgcc and libstdc++ of
# GCC 11, zlib 1.2.11), so that the automatic Requires of a real dynamically linked payload (a
# cgo or C++-linked binary: libstdc++.so.6(GLIBCXX_3.4.9), libresolv.so.2, ...) resolve
# against the SAMPLE base too.
GLIBC_VERSIONS = ("2.2.5", "2.2.6", "2.3", "2.3.2", "2.3.3", "2.3.4", "2.4", "2.5", "2.6",
                  "2.7", "2.8", "2.9", "2.10", "2.11", "2.12", "2.13", "2.14", "2.15", "2.16",
                  "2.17", "2.18", "2.22", "2.23", "2.24", "2.25", "2.26", "2.27", "2.28",
                  "2.29", "2.30", "2.32", "2.33", "2.34")
GLIBC_LIBS = ("libc.so.6", "libdl.so.2", "libm.so.6", "libpthread.so.0", "librt.so.1",
              "libresolv.so.2", "libutil.so.1", "libanl.so.1")
LOADERS = {"x86_64": "ld-linux-x86-64.so.2", "aarch64": "ld-linux-aarch64.so.1"}
GCC_VERSIONS = ("3.0", "3.3", "3.3.1", "3.4", "3.4.2", "4.0.0", "4.2.0", "4.3.0", "4.4.0",
                "4.7.0", "4.8.0", "7.0.0")
GLIBCXX_VERSIONS = ("3.4", *(f"3.4.{n}" for n in range(1, 30)))
CXXABI_VERSIONS = ("1.3", *(f"1.3.{n}" for n in range(1, 14)))
ZLIB_VERSIONS = ("1.2.0", "1.2.0.2", "1.2.0.8", "1.2.2", "1.2.2.3", "1.2.2.4", "1.2.3.3",
                 "1.2.3.4", "1.2.3.5", "1.2.5.1", "1.2.5.2", "1.2.7.1", "1.2.9")


def _soname_provides(libs: tuple[str, ...], prefix: str,
                     versions: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(cap for lib in libs for cap in
                 (f"{lib}()(64bit)", *(f"{lib}({prefix}_{v})(64bit)" for v in versions)))


GREENBOOT_UNITS = ("greenboot-healthcheck.service", "greenboot-task-runner.service",
                   "greenboot-grub2-set-counter.service", "greenboot-grub2-set-success.service",
                   "greenboot-rpm-ostree-grub2-check-fallback.service", "greenboot-status.service",
                   "redboot-auto-reboot.service", "redboot-task-runner.service")


def _greenboot_units() -> dict[str, str]:
    """greenboot's units, so presets and blueprints that enable them work on the sample."""
    return {f"/usr/lib/systemd/system/{unit}":
            f"# SAMPLE stand-in for {unit} of greenboot (microshift-edge-builder).\n"
            f"[Unit]\nDescription=SAMPLE {unit}\n\n[Service]\nType=oneshot\n"
            "ExecStart=/bin/true\n\n[Install]\nWantedBy=multi-user.target\n"
            for unit in GREENBOOT_UNITS}


def _libraries(arch: str) -> tuple[StandIn, ...]:
    """The C and C++ runtimes, with the sonames and symbol versions that rpmbuild's
    automatic Requires of a real executable ask for."""
    return (
        StandIn("glibc", provides=("rtld(GNU_HASH)",
                                   *_soname_provides((*GLIBC_LIBS, LOADERS[arch]), "GLIBC",
                                                     GLIBC_VERSIONS)),
                files={"/usr/share/doc/glibc-sample/README": _text("glibc")}),
        StandIn("libgcc", provides=_soname_provides(("libgcc_s.so.1",), "GCC", GCC_VERSIONS),
                files={"/usr/share/doc/libgcc-sample/README": _text("libgcc")}),
        StandIn("libstdc++", provides=(
            *_soname_provides(("libstdc++.so.6",), "GLIBCXX", GLIBCXX_VERSIONS),
            *(f"libstdc++.so.6(CXXABI_{v})(64bit)" for v in CXXABI_VERSIONS),
            "libstdc++.so.6(CXXABI_TM_1)(64bit)"),
                files={"/usr/share/doc/libstdc++-sample/README": _text("libstdc++")}),
        StandIn("zlib", provides=_soname_provides(("libz.so.1",), "ZLIB", ZLIB_VERSIONS),
                files={"/usr/share/doc/zlib-sample/README": _text("zlib")}),
    )


def stand_ins(arch: str) -> tuple[StandIn, ...]:
    kver = f"{KERNEL_VERSION}.{arch}"
    return (
        *_libraries(arch),
        StandIn("filesystem", dirs=("/etc", "/usr/bin", "/usr/lib", "/usr/share", "/var")),
        StandIn("bash", provides=("/bin/sh", "/bin/bash", "/usr/bin/sh"),
                files={"/usr/bin/bash": _text("bash")}),
        StandIn("coreutils", files={"/usr/share/doc/coreutils-sample/README": _text("coreutils")}),
        StandIn("sample-release", provides=("system-release", "redhat-release"),
                files={"/usr/lib/os-release": OS_RELEASE}),
        StandIn("systemd", provides=("systemd-units", "/usr/bin/systemctl"),
                files={"/usr/lib/systemd/README.sample": _text("systemd")},
                dirs=("/usr/lib/systemd/system", "/etc/systemd/system",
                      "/usr/lib/systemd/system-preset")),
        StandIn("kernel", provides=("kernel-core", f"kernel-uname-r = {kver}"),
                files={f"/usr/lib/modules/{kver}/vmlinuz": _text("the Linux kernel image"),
                       f"/usr/lib/modules/{kver}/initramfs.img": _text("the initramfs")}),
        StandIn("python3", provides=("/usr/bin/python3",),
                files={"/usr/share/doc/python3-sample/README": _text("python3")}),
        StandIn("python3-pyyaml",
                files={"/usr/share/doc/python3-pyyaml-sample/README": _text("PyYAML")}),
        StandIn("cri-o", files={"/usr/share/doc/cri-o-sample/README": _text("cri-o")},
                dirs=("/etc/containers",)),
        StandIn("cri-tools", files={"/usr/share/doc/cri-tools-sample/README": _text("crictl")}),
        StandIn("conntrack-tools", files={"/usr/share/doc/conntrack-sample/README": _text("c")}),
        StandIn("iptables-nft", provides=("iptables",),
                files={"/usr/share/doc/iptables-sample/README": _text("iptables")}),
        StandIn("hostname", files={"/usr/share/doc/hostname-sample/README": _text("hostname")}),
        StandIn("iproute", files={"/usr/share/doc/iproute-sample/README": _text("iproute")}),
        StandIn("openvswitch3.1", provides=("openvswitch",),
                files={"/usr/share/doc/openvswitch-sample/README": _text("Open vSwitch")}),
        StandIn("NetworkManager", files={"/usr/share/doc/nm-sample/README": _text("NM")},
                dirs=("/etc/NetworkManager/conf.d",)),
        StandIn("NetworkManager-ovs", requires=("NetworkManager",),
                files={"/usr/share/doc/nm-ovs-sample/README": _text("NetworkManager-ovs")}),
        StandIn("firewalld", files={"/usr/share/doc/firewalld-sample/README": _text("firewalld")}),
        StandIn("greenboot", files={"/usr/share/doc/greenboot-sample/README": _text("greenboot"),
                                    **_greenboot_units()},
                dirs=("/etc/greenboot/check/required.d", "/etc/greenboot/check/wanted.d",
                      "/etc/greenboot/green.d", "/etc/greenboot/red.d")),
        StandIn("lvm2", files={"/usr/share/doc/lvm2-sample/README": _text("lvm2")}),
        StandIn("containernetworking-plugins",
                files={"/usr/share/doc/cni-sample/README": _text("CNI plugins")}),
        StandIn("ostree", files={"/usr/share/doc/ostree-sample/README": _text("ostree")}),
        StandIn("gnupg2", files={"/usr/share/doc/gnupg2-sample/README": _text("GnuPG")}),
        StandIn("openssl", files={"/usr/share/doc/openssl-sample/README": _text("OpenSSL")}),
        StandIn("zstd", files={"/usr/share/doc/zstd-sample/README": _text("zstd")}),
        StandIn("jq", files={"/usr/share/doc/jq-sample/README": _text("jq")}),
        StandIn("curl", files={"/usr/share/doc/curl-sample/README": _text("curl")}),
    )


def build_sample_base(ctx: Context) -> Path:
    """Build every stand-in for each architecture of the release (cached by content) and
    publish DIR/sample-base/rpms and a repository per architecture, DIR/sample-base/repo/ARCH,
    as the project's own."""
    release = ctx.release
    epoch = release.source_date_epoch
    base = ctx.layout.sample_base
    outputs: list[Path] = []
    builds = [(s, arch) for arch in release.architectures for s in stand_ins(arch)]
    unbuilt = [s for s, arch in builds if not is_built(_step(s, arch, epoch), ctx.build_dir)]
    # Each stand-in: an rpmbuild tree and a small RPM (13 KiB measured); then the metadata.
    ensure_space(ctx.build_dir, (len(unbuilt) * 32 * 1024 + MiB // 2 if unbuilt else 0)
                 + policy_space(ctx) * len(release.architectures),
                 "the SAMPLE base repository")
    with ctx.progress.step(f"sample-base: stand-in RPMs (SAMPLE) for "
                           f"{', '.join(release.architectures)}"):
        for stand_in, arch in builds:
            outputs.extend(_build_stand_in(ctx, stand_in, arch))
        for arch in release.architectures:
            outputs.extend(policy_stand_ins(ctx, arch))
    with ctx.progress.step("sample-base: repository"):
        _publish(ctx, outputs, base, epoch)
    return base


def _build_stand_in(ctx: Context, stand_in: StandIn, arch: str) -> list[Path]:
    epoch = ctx.release.source_date_epoch

    def produce(out: Path) -> None:
        topdir = out / "topdir"
        spec = write_spec(stand_in, arch, topdir)
        for rpm in build_spec(ctx.runner, spec, topdir, arch, epoch):
            rpm.rename(out / rpm.name)
        _remove_tree(topdir)

    out, _ = materialize(_step(stand_in, arch, epoch), ctx.build_dir, produce, ctx.progress)
    return sorted(out.glob("*.rpm"))


def _step(stand_in: StandIn, arch: str, epoch: int) -> Step:
    return Step(f"sample-rpm:{stand_in.name}.{arch}", {
        "stand_in": {"name": stand_in.name, "provides": stand_in.provides,
                     "requires": stand_in.requires, "files": stand_in.files,
                     "dirs": stand_in.dirs},
        "version": SAMPLE_VERSION, "arch": arch, "macros": rpm_macros(epoch)})


def _publish(ctx: Context, rpms: list[Path], base: Path, epoch: int) -> None:
    inputs = {"rpms": {rpm.name: file_digest(rpm) for rpm in rpms}, "epoch": epoch}
    rpms_step = Step("sample-base-rpms", inputs)
    rpms_out, _ = materialize(rpms_step, ctx.build_dir,
                              lambda out: link_files(rpms, out), ctx.progress)
    publish(ctx.build_dir, "sample-base/rpms", rpms_step, rpms_out)
    publish_arch_repos(ctx, rpms, ctx.layout.sample_base_repos)
    ctx.progress.info(f"{len(rpms)} SAMPLE stand-in RPMs in {base / 'rpms'}; "
                      f"repositories {base / 'repo'}/ARCH")


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
