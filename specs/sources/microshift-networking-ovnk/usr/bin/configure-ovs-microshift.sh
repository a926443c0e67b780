#!/bin/bash
# Entry point of microshift-ovs-init.service (microshift-networking-ovnk).
# Honours `disableOVSInit: true` in /etc/microshift/ovn.yaml (seed 001): the administrator
# then creates br-ex by hand; otherwise configure-ovs.sh creates it.
set -euo pipefail

OVN_CONFIG=${OVN_CONFIG:-/etc/microshift/ovn.yaml}

ovs_init_disabled() {
    [ -f "$OVN_CONFIG" ] || return 1
    grep -Eq '^disableOVSInit[[:space:]]*:[[:space:]]*(true|True|TRUE)[[:space:]]*(#.*)?$' \
        "$OVN_CONFIG"
}

if ovs_init_disabled; then
    echo "microshift-ovs-init: disableOVSInit is true in $OVN_CONFIG; not creating br-ex." >&2
    echo "microshift-ovs-init: create it by hand: ovs-vsctl add-br br-ex;" \
         "ovs-vsctl add-port br-ex <interface>; ip link set br-ex up" >&2
    exit 0
fi

exec /usr/bin/configure-ovs.sh OVNKubernetes
