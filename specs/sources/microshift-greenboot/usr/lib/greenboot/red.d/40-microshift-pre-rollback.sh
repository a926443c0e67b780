#!/bin/bash
#
# greenboot red.d: the boot failed its health checks. Record the failure and keep diagnostics;
# when this was the last attempt (boot_counter=0: grub boots the previous deployment next),
# mark MicroShift's data for restore so the previous deployment starts on its own backed-up
# data instead of data that the failed deployment may have migrated, and clean the OVN state
# the failed deployment left (upstream's red.d: `microshift-cleanup-data --ovn`), so the
# previous deployment's OVN-Kubernetes starts clean. The restore marker
# /var/lib/microshift-backups/restore is read by microshift-data-restore.service, or by the
# MicroShift binary itself (4.14 and later restore when the file exists).
set -euo pipefail

# shellcheck source=usr/share/microshift/functions/greenboot.sh
source "${MICROSHIFT_ROOT:-}/usr/share/microshift/functions/greenboot.sh"

KEEP_DIAGNOSTICS=5
CLEANUP_DATA="${MICROSHIFT_ROOT}/usr/bin/microshift-cleanup-data"
OVNK_PLUGIN_DIR="${MICROSHIFT_COMPONENTS_DIR}/005-networking-ovnk"

# Keep this boot's failure reason and boot variables, the newest KEEP_DIAGNOSTICS of them.
function save_diagnostics() {
    local -r dir="${MICROSHIFT_BACKUP_DIR}/diagnostics"
    local -r log="${dir}/$1_$2.log"
    mkdir -p "${dir}"
    {
        print_boot_status
        echo "Health check failure:"
        cat "${MICROSHIFT_GREENBOOT_RUN_DIR}/healthcheck-failure.log" 2>/dev/null ||
            echo "(no failure log: the check did not record one)"
    } >"${log}"
    echo "Saved diagnostics to ${log#"${MICROSHIFT_ROOT}"}"
    local old
    # shellcheck disable=SC2012 # names are deployment and boot ids: no unusual characters
    for old in $(ls -1t "${dir}" | tail -n +$(( KEEP_DIAGNOSTICS + 1 ))) ; do
        rm -f "${dir:?}/${old}"
    done
}

# Clean OVN-Kubernetes' run-time state before the rollback, with the release's own script.
function clean_ovn_state() {
    if [ ! -d "${OVNK_PLUGIN_DIR}" ] ; then
        return 0
    fi
    if [ ! -x "${CLEANUP_DATA}" ] ; then
        echo "microshift-cleanup-data is not installed: OVN state left in place"
        return 0
    fi
    echo "Preparing MicroShift for a clean start: microshift-cleanup-data --ovn"
    "${CLEANUP_DATA}" --ovn || echo "microshift-cleanup-data --ovn failed" \
        "(exit $?): the previous deployment may find stale OVN state"
}

echo "STARTED"
print_boot_status
# The binary keeps health.json itself when it backs up its own data.
if shell_data_backup ; then
    record_health unhealthy
fi

deployment="$(booted_deployment_id)" || deployment=""
boot="$(current_boot_id)" || boot="unknown"
save_diagnostics "${deployment:-unknown}" "${boot}"

counter="$(grub_boot_counter)"
if [ "${counter}" != "0" ] ; then
    echo "boot_counter=${counter:-unset}: no rollback scheduled, MicroShift data left in place"
    echo "FINISHED"
    exit 0
fi

echo "System rollback imminent: marking MicroShift data for restore on the previous deployment"
jq -n --arg deploy "${deployment}" --arg boot "${boot}" \
    '{failed_deployment_id: $deploy, boot_id: $boot}' >"${MICROSHIFT_BACKUP_DIR}/restore.tmp"
mv -f "${MICROSHIFT_BACKUP_DIR}/restore.tmp" "${MICROSHIFT_BACKUP_DIR}/restore"
clean_ovn_state
echo "FINISHED"
