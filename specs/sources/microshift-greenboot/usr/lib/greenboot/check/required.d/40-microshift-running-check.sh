#!/bin/bash
#
# greenboot required check: the boot is healthy when microshift.service is enabled and active,
# the API server is ready and every workload of core and of each installed component is ready.
# All of it must happen within one wait timeout, which grows with each boot attempt of an
# upgrade (see wait_timeout_seconds). A failure here makes greenboot retry the boot and, after
# GREENBOOT_MAX_BOOT_ATTEMPTS, roll back to the previous deployment.
set -euo pipefail

# shellcheck source=usr/share/microshift/functions/greenboot.sh
source "${MICROSHIFT_ROOT:-}/usr/share/microshift/functions/greenboot.sh"

DEADLINE_MS=0
FAILURE_LOG="${MICROSHIFT_GREENBOOT_RUN_DIR}/healthcheck-failure.log"
# Why MicroShift could not start: microshift-components.service's plugin failure, and the
# pre-run data management of MicroShift 4.14 and later.
COMPONENTS_FAILURE="${MICROSHIFT_ROOT}/run/microshift-components/failure.log"
PRERUN_FAILURE="${MICROSHIFT_BACKUP_DIR}/prerun_failed.log"

# Wait for one condition until the shared deadline; on timeout, record what failed and exit.
# arg1: description; argN: the command that succeeds once the condition holds.
function require() {
    local -r what="$1"
    shift
    if wait_until "${DEADLINE_MS}" "$@" ; then
        echo "ok: ${what}"
        return 0
    fi
    mkdir -p "${MICROSHIFT_GREENBOOT_RUN_DIR}"
    echo "timed out after ${WAIT_TIMEOUT_SECS}s waiting for: ${what}" | tee "${FAILURE_LOG}"
    print_start_failures | tee -a "${FAILURE_LOG}"
    echo "FAILURE"
    exit 1
}

# Print a failure log of MicroShift's own start, if there is one: the components' plugins
# (microshift-components.service) and the binary's pre-run data management (4.14 and later).
function print_start_failures() {
    local log
    for log in "${COMPONENTS_FAILURE}" "${PRERUN_FAILURE}" ; do
        if [ -s "${log}" ] ; then
            echo "Failure log in ${log#"${MICROSHIFT_ROOT}"}:"
            sed 's/^/    /' "${log}"
        fi
    done
}

# A failed unit will not become active: fail at once, with its reason, as upstream's check
# does for microshift.service, instead of waiting out the whole timeout.
function fail_if_failed() {
    local -r unit="$1"
    if [ "$(systemctl is-failed "${unit}" 2>/dev/null || true)" = "failed" ] ; then
        mkdir -p "${MICROSHIFT_GREENBOOT_RUN_DIR}"
        echo "${unit} failed" | tee "${FAILURE_LOG}"
        print_start_failures | tee -a "${FAILURE_LOG}"
        echo "FAILURE"
        exit 1
    fi
}

# Ask for the workloads not ready yet; print "ok" for each that has become ready.
function workloads_pending_ready() {
    local -a still=()
    local line
    mapfile -t still < <(workloads_not_ready "${PENDING[@]}")
    for line in "${PENDING[@]}" ; do
        if [[ ! " ${still[*]/%/|} " == *" ${line}|"* ]] ; then
            echo "ok: $(describe_workloads "${line}")"
        fi
    done
    PENDING=("${still[@]}")
    [ "${#PENDING[@]}" -eq 0 ]
}

# "kind namespace/name is ready" for each "namespace kind name" line, joined with "; ".
function describe_workloads() {
    local line ns kind name text=""
    for line in "$@" ; do
        read -r ns kind name <<<"${line}"
        text="${text:+${text}; }${kind} ${ns}/${name} is ready"
    done
    echo "${text}"
}

function microshift_service_active() {
    fail_if_failed microshift-components.service
    fail_if_failed microshift.service
    [ "$(systemctl is-active microshift.service 2>/dev/null || true)" = "active" ]
}

echo "STARTED"
print_boot_status

if [ "$(systemctl is-enabled microshift.service 2>/dev/null || true)" != "enabled" ] ; then
    echo "microshift.service is not enabled: nothing to check"
    echo "FINISHED"
    exit 0
fi

# Read the workload lists before waiting: a broken list fails the boot at once.
if ! WORKLOADS="$(health_workloads)" ; then
    echo "FAILURE: cannot read the MicroShift health lists"
    exit 1
fi
mapfile -t WORKLOAD_LINES <<<"${WORKLOADS}"

WAIT_TIMEOUT_SECS="$(wait_timeout_seconds)"
DEADLINE_MS=$(( $(now_ms) + WAIT_TIMEOUT_SECS * 1000 ))
echo "Waiting up to ${WAIT_TIMEOUT_SECS}s for MicroShift and ${#WORKLOAD_LINES[@]} workload(s)"

require "microshift.service is active" microshift_service_active
require "the API server is ready and live (/readyz, /livez)" api_ready
PENDING=()
for line in "${WORKLOAD_LINES[@]}" ; do
    [ -n "${line}" ] && PENDING+=("${line}")
done
# Every workload is asked for at each poll, until all are ready or the deadline passes; the
# failure names each one still not ready.
if ! wait_until "${DEADLINE_MS}" workloads_pending_ready ; then
    require "$(describe_workloads "${PENDING[@]}")" false
fi

rm -f "${FAILURE_LOG}"
echo "FINISHED"
