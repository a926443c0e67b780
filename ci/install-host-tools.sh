#!/usr/bin/env bash
# Install the host tools the pipeline runs (rpmbuild, createrepo_c, ostree, skopeo, ...)
# when they are missing. Idempotent and fast when everything is present: it only looks.
# Debian/Ubuntu use apt-get, Fedora/RHEL/CentOS use dnf. Needs root (or sudo) to install.
set -euo pipefail

# command-or-file to check -> Debian package -> Fedora package
TOOLS=(
    "rpmbuild rpm rpm-build"
    "createrepo_c createrepo-c createrepo_c"
    "ostree ostree ostree"
    "skopeo skopeo skopeo"
    "umoci umoci umoci"
    "xorriso xorriso xorriso"
    "gpg gnupg gnupg2"
    "ip iproute2 iproute"
    "tc iproute2 iproute-tc"
    "xdelta3 xdelta3 xdelta"
    "zstd zstd zstd"
    "shellcheck shellcheck ShellCheck"
    "cpio cpio cpio"
    "rpm2cpio rpm rpm"
    "vgs lvm2 lvm2"
    "losetup mount util-linux"
    "implantisomd5 isomd5sum isomd5sum"
    "jq jq jq"
    "curl curl curl"
    # Test certificates for the updater relay's TLS to the remote.
    "openssl openssl openssl"
    "chattr e2fsprogs e2fsprogs"
    # SELinux: compile policy modules (microshift-selinux, the SAMPLE container module),
    # install them into an image's policy store, inspect the result.
    "checkmodule checkpolicy checkpolicy"
    "semodule policycoreutils policycoreutils"
    "semodule_package semodule-utils policycoreutils-devel"
    "sefcontext_compile selinux-utils libselinux-utils"
    "sesearch setools setools-console"
    "make make make"
    "m4 m4 m4"
    "gawk gawk gawk"
    "bzip2 bzip2 bzip2"
    # The simulated device's ostree runs the deployment's semodule through bubblewrap.
    "bwrap bubblewrap bubblewrap"
    "rsync rsync rsync"
    # dnf reads each architecture's repository as a machine of that architecture would.
    "dnf dnf dnf"
    "g++ g++ gcc-c++"
    # `kubectl kustomize`: what MicroShift applies, checked on the kustomizations that
    # microshift-components writes (tests, device simulation). Debian: kubernetes-client.
    "kubectl kubernetes-client kubernetes-client"
)
PY_RPM_DEB=python3-rpm
PY_RPM_FEDORA=python3-rpm

missing_deb=()
missing_fedora=()
for entry in "${TOOLS[@]}"; do
    read -r tool deb fedora <<<"$entry"
    if ! command -v "$tool" >/dev/null 2>&1; then
        missing_deb+=("$deb")
        missing_fedora+=("$fedora")
    fi
done
# rpmlint's spelling check (pyenchant) needs the enchant library and an English dictionary;
# without them the check is silently skipped and rpmlint reports our spelling filters as
# unused, so lint results would differ from machine to machine.
if ! ldconfig -p 2>/dev/null | grep -q 'libenchant-2\.so'; then
    missing_deb+=(libenchant-2-2)
    missing_fedora+=(enchant2)
fi
if [ ! -e /usr/share/hunspell/en_US.dic ] && [ ! -e /usr/share/myspell/en_US.dic ]; then
    missing_deb+=(hunspell-en-us)
    missing_fedora+=(hunspell-en-US)
fi
# The policy devel Makefile and headers that microshift-selinux's %build compiles against.
if [ ! -e /usr/share/selinux/devel/Makefile ]; then
    missing_deb+=(selinux-policy-dev)
    missing_fedora+=(selinux-policy-devel)
fi
# Debian's reference policy: the SAMPLE base's SAMPLE policy is built from its modules
# (builder/rpm/sample_policy.py). Fedora does not package it; there the sample flow
# composes unlabelled, with a warning.
if [ ! -e /usr/share/selinux/default/base.pp.bz2 ] && command -v apt-get >/dev/null 2>&1; then
    missing_deb+=(selinux-policy-default)
fi
# microshift-components (a zip application the device runs with its system Python) needs
# PyYAML; the device simulation runs it with this machine's /usr/bin/python3.
if ! /usr/bin/python3 -c 'import yaml' >/dev/null 2>&1; then
    missing_deb+=(python3-yaml)
    missing_fedora+=(python3-pyyaml)
fi
# The rpm Python bindings (used through the `rpm` shim from PyPI inside virtualenvs).
if ! /usr/bin/python3 -c 'import rpm' >/dev/null 2>&1; then
    missing_deb+=("$PY_RPM_DEB")
    missing_fedora+=("$PY_RPM_FEDORA")
fi
# RHEL 9's system Python 3.9 runs the device's zip applications; a test runs them on one.
# Fedora packages python3.9; Debian 12 packages none (that test then skips, with the reason
# docs/testing.md lists).
if ! command -v python3.9 >/dev/null 2>&1 && command -v dnf >/dev/null 2>&1; then
    missing_fedora+=(python3.9)
fi

# The simulated device of the other architecture (an aarch64 device on an x86_64 host):
# composing runs none of its programs, but ostree runs the new deployment's semodule on
# every upgrade, which needs qemu's user-mode emulation registered with binfmt_misc.
case "$(uname -m)" in
    x86_64) FOREIGN=aarch64 ;;
    aarch64) FOREIGN=x86_64 ;;
    *) FOREIGN="" ;;
esac
if [ -n "$FOREIGN" ] && ! compgen -G "/usr/lib/binfmt.d/qemu-$FOREIGN*.conf" >/dev/null; then
    missing_deb+=(qemu-user-static)
    missing_fedora+=(qemu-user-static)
fi

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
fi

# Registers qemu's handler for the other architecture unless the kernel has it (a fresh
# boot has none until systemd-binfmt runs, and containers often have no systemd).
register_foreign_binfmt() {
    local misc=/proc/sys/fs/binfmt_misc conf
    [ -n "$FOREIGN" ] || return 0
    [ -e "$misc/qemu-$FOREIGN" ] && return 0
    conf=$(compgen -G "/usr/lib/binfmt.d/qemu-$FOREIGN*.conf" | head -n 1)
    [ -n "$conf" ] || return 0
    if [ ! -e "$misc/register" ] && ! $SUDO mount -t binfmt_misc binfmt_misc "$misc" 2>/dev/null; then
        echo "host tools: binfmt_misc cannot be mounted here: a simulated $FOREIGN device" \
             "cannot deploy updates on this machine" >&2
        return 0
    fi
    if grep -v '^#' "$conf" | $SUDO tee "$misc/register" >/dev/null 2>&1; then
        echo "host tools: registered qemu's $FOREIGN handler ($conf)"
    else
        echo "host tools: could not register $conf with binfmt_misc" >&2
    fi
}

if [ ${#missing_deb[@]} -eq 0 ] && [ ${#missing_fedora[@]} -eq 0 ]; then
    register_foreign_binfmt
    echo "host tools: all present"
    exit 0
fi

if [ "$(id -u)" -ne 0 ] && [ -z "$SUDO" ]; then
    echo "host tools missing (${missing_deb[*]}) and not root: install them yourself" >&2
    exit 1
fi

if command -v apt-get >/dev/null 2>&1; then
    mapfile -t pkgs < <(printf '%s\n' "${missing_deb[@]}" | sort -u)
    echo "host tools: installing ${pkgs[*]} with apt-get"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${pkgs[@]}"
elif command -v dnf >/dev/null 2>&1; then
    mapfile -t pkgs < <(printf '%s\n' "${missing_fedora[@]}" | sort -u)
    echo "host tools: installing ${pkgs[*]} with dnf"
    $SUDO dnf install -y "${pkgs[@]}"
else
    echo "host tools missing (${missing_deb[*]}) and neither apt-get nor dnf found" >&2
    exit 1
fi
register_foreign_binfmt
