#!/usr/bin/env bash
# Install the host tools the pipeline and its tests run (rpmbuild, createrepo_c, ostree,
# skopeo, ...) when they are missing: the list is ci/host-tools.txt. Idempotent and fast when
# everything is present: it only looks, and says "all present". Debian/Ubuntu use apt-get,
# Fedora/RHEL/CentOS use dnf. Needs root (or sudo) to install.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# The package manager decides which column of the list applies: on Debian with dnf installed
# (the tests use it) apt-get is still the one that installs.
if command -v apt-get >/dev/null 2>&1; then
    MANAGER=apt-get COLUMN=2
elif command -v dnf >/dev/null 2>&1; then
    MANAGER=dnf COLUMN=3
else
    MANAGER="" COLUMN=2
fi

present() {  # CHECK as ci/host-tools.txt describes it
    local check=$1 alternative dir
    case "$check" in
        py:*) /usr/bin/python3 -c "import ${check#py:}" >/dev/null 2>&1 ;;
        /*) local IFS='|'
            for alternative in $check; do
                compgen -G "$alternative" >/dev/null && return 0
            done
            return 1 ;;
        *)  command -v "$check" >/dev/null 2>&1 && return 0
            for dir in /usr/local/sbin /usr/sbin /sbin; do
                [ -x "$dir/$check" ] && return 0
            done
            return 1 ;;
    esac
}

# The packages of this distribution whose check fails, one per line.
missing_packages() {
    local fields package
    while read -r -a fields; do
        [ ${#fields[@]} -ge 3 ] || continue
        case "${fields[0]}" in \#*) continue ;; esac
        package=${fields[$((COLUMN - 1))]}
        [ "$package" = "-" ] && continue
        present "${fields[0]}" || echo "$package"
    done < "$HERE/host-tools.txt"
}
mapfile -t missing < <(missing_packages)

# The simulated device of the other architecture (an aarch64 device on an x86_64 host):
# composing runs none of its programs, but ostree runs the new deployment's semodule on
# every upgrade, which needs qemu's user-mode emulation registered with binfmt_misc.
case "$(uname -m)" in
    x86_64) FOREIGN=aarch64 ;;
    aarch64) FOREIGN=x86_64 ;;
    *) FOREIGN="" ;;
esac
if [ -n "$FOREIGN" ] && ! compgen -G "/usr/lib/binfmt.d/qemu-$FOREIGN*.conf" >/dev/null; then
    missing+=(qemu-user-static)
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

if [ ${#missing[@]} -eq 0 ]; then
    register_foreign_binfmt
    echo "host tools: all present"
    exit 0
fi
mapfile -t pkgs < <(printf '%s\n' "${missing[@]}" | sort -u)

if [ "$(id -u)" -ne 0 ] && [ -z "$SUDO" ]; then
    echo "host tools missing (${pkgs[*]}) and not root: install them yourself" >&2
    exit 1
fi

case "$MANAGER" in
    apt-get)
        echo "host tools: installing ${pkgs[*]} with apt-get"
        $SUDO apt-get update -q
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${pkgs[@]}" ;;
    dnf)
        echo "host tools: installing ${pkgs[*]} with dnf"
        $SUDO dnf install -y "${pkgs[@]}" ;;
    *)
        echo "host tools missing (${pkgs[*]}) and neither apt-get nor dnf found" >&2
        exit 1 ;;
esac
# A package that installed without providing what was checked would make every later run
# install it again: say so now.
mapfile -t still < <(missing_packages)
if [ ${#still[@]} -gt 0 ]; then
    echo "host tools: still missing after installing: ${still[*]}" >&2
    exit 1
fi
register_foreign_binfmt
