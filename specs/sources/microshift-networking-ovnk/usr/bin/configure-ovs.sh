#!/bin/bash
# Create the OVS gateway bridge br-ex that OVN-Kubernetes needs, as NetworkManager
# connections, moving the host's default interface (or the one named in
# /var/lib/ovnk/iface_default_hint) into it with its IP configuration; and a second bridge
# br-ex1 for the interface named in /etc/ovnk/extra_bridge (seed 001).
# A reduction of OpenShift's configure-ovs.sh to what a single-node MicroShift device needs.
# Idempotent: bridges whose connections are already active are left as they are.
set -euo pipefail

MODE=${1:-OVNKubernetes}
HINT_FILE=/var/lib/ovnk/iface_default_hint
EXTRA_BRIDGE_FILE=/etc/ovnk/extra_bridge

log() { echo "configure-ovs: $*" >&2; }

if [ "$MODE" != "OVNKubernetes" ]; then
    log "network type $MODE does not use OVS; nothing to do"
    exit 0
fi

route_interface() {
    ip "$1" route show default 2>/dev/null |
        awk '{for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit }}'
}

default_interface() {
    local iface=""
    if [ -s "$HINT_FILE" ]; then
        iface=$(tr -d '[:space:]' <"$HINT_FILE")
        if [ -n "$iface" ] && [ -e "/sys/class/net/$iface" ]; then
            echo "$iface"
            return
        fi
        log "$HINT_FILE names '$iface', which does not exist; using the default route"
    fi
    iface=$(route_interface -4)
    [ -n "$iface" ] || iface=$(route_interface -6)
    echo "$iface"
}

connection_active() {
    [ "$(nmcli -g GENERAL.STATE connection show "$1" 2>/dev/null)" = "activated" ]
}

# Copy the IPv4/IPv6 settings of the interface's current connection onto br-ex, so the
# node keeps its address (static or DHCP) when the interface moves into the bridge.
ip_settings() {
    local old_conn=$1 family method
    for family in ipv4 ipv6; do
        method=auto
        if [ -n "$old_conn" ]; then
            method=$(nmcli -g "$family.method" connection show "$old_conn" || echo auto)
        fi
        printf '%s\n' "$family.method" "$method"
        if [ "$method" = "manual" ]; then
            printf '%s\n' "$family.addresses" \
                "$(nmcli -g "$family.addresses" connection show "$old_conn" | sed 's/\\//g')"
            printf '%s\n' "$family.gateway" "$(nmcli -g "$family.gateway" connection show "$old_conn")"
            printf '%s\n' "$family.dns" "$(nmcli -g "$family.dns" connection show "$old_conn")"
        fi
    done
}

create_bridge() {
    local bridge=$1 iface=$2 phys=$3
    if connection_active "ovs-if-$bridge"; then
        log "$bridge is already up; keeping it"
        return
    fi
    if [ ! -e "/sys/class/net/$iface" ]; then
        log "interface '$iface' for $bridge does not exist"
        return 1
    fi
    local old_conn mac mtu
    old_conn=$(nmcli -g GENERAL.CONNECTION device show "$iface" 2>/dev/null || true)
    mac=$(cat "/sys/class/net/$iface/address")
    mtu=$(cat "/sys/class/net/$iface/mtu")
    log "creating $bridge on $iface (mac $mac, mtu $mtu, previous connection '${old_conn:-none}')"

    nmcli connection delete "$bridge" "ovs-port-$bridge" "ovs-port-$phys" "ovs-if-$phys" \
        "ovs-if-$bridge" >/dev/null 2>&1 || true
    nmcli connection add type ovs-bridge con-name "$bridge" conn.interface "$bridge" \
        802-3-ethernet.mtu "$mtu"
    nmcli connection add type ovs-port con-name "ovs-port-$phys" conn.interface "$iface" \
        master "$bridge"
    nmcli connection add type ovs-port con-name "ovs-port-$bridge" conn.interface "$bridge" \
        master "$bridge"
    nmcli connection add type 802-3-ethernet con-name "ovs-if-$phys" conn.interface "$iface" \
        master "ovs-port-$phys" 802-3-ethernet.mtu "$mtu" connection.autoconnect-priority 100

    local -a settings=()
    mapfile -t settings < <(ip_settings "$old_conn")
    nmcli connection add type ovs-interface slave-type ovs-port con-name "ovs-if-$bridge" \
        conn.interface "$bridge" master "ovs-port-$bridge" 802-3-ethernet.mtu "$mtu" \
        802-3-ethernet.cloned-mac-address "$mac" connection.autoconnect-priority 100 \
        "${settings[@]}"

    nmcli connection up "ovs-if-$phys"
    nmcli connection up "ovs-if-$bridge"
    if [ -n "$old_conn" ]; then
        nmcli connection modify "$old_conn" connection.autoconnect no || true
    fi
}

main() {
    local iface extra
    iface=$(default_interface)
    if [ -z "$iface" ]; then
        log "no default route and no $HINT_FILE: cannot choose the interface for br-ex"
        exit 1
    fi
    if [ "$iface" = "br-ex" ]; then
        log "the default route already uses br-ex; nothing to do"
    else
        create_bridge br-ex "$iface" phys0
        mkdir -p "$(dirname "$HINT_FILE")"
        echo "$iface" >"$HINT_FILE"
    fi
    if [ -s "$EXTRA_BRIDGE_FILE" ]; then
        extra=$(tr -d '[:space:]' <"$EXTRA_BRIDGE_FILE")
        if [ "$extra" = "$iface" ]; then
            log "$EXTRA_BRIDGE_FILE names the br-ex interface $extra; ignoring it"
        else
            create_bridge br-ex1 "$extra" phys1
        fi
    fi
}

main
