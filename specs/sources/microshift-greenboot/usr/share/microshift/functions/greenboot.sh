# shellcheck shell=bash
#
# Functions shared by the microshift-greenboot scripts: the required.d health check, the red.d
# and green.d scripts and the microshift-data-restore service. Sourced, never run.
#
# Every file path is prefixed with MICROSHIFT_ROOT, which is empty on a device. The device
# simulation (python -m builder device) sets it to a composed view of the booted deployment
# (etc and usr from the deployment, var from the stateroot, run fresh for each boot), so the
# simulation runs these very scripts. Commands (systemctl, grub2-editenv, curl, jq, stat) are
# looked up on PATH; the simulation puts stand-ins for systemctl and grub2-editenv first.

MICROSHIFT_ROOT="${MICROSHIFT_ROOT:-}"
GREENBOOT_CONF="${MICROSHIFT_ROOT}/etc/greenboot/greenboot.conf"
MICROSHIFT_DATA_DIR="${MICROSHIFT_ROOT}/var/lib/microshift"
MICROSHIFT_BACKUP_DIR="${MICROSHIFT_ROOT}/var/lib/microshift-backups"
MICROSHIFT_KUBECONFIG="${MICROSHIFT_KUBECONFIG:-${MICROSHIFT_DATA_DIR}/resources/kubeadmin/kubeconfig}"
MICROSHIFT_CORE_HEALTH_LIST="${MICROSHIFT_ROOT}/usr/share/microshift/greenboot/core-healthcheck.list"
MICROSHIFT_COMPONENTS_DIR="${MICROSHIFT_ROOT}/usr/lib/microshift/components.d"
MICROSHIFT_GREENBOOT_RUN_DIR="${MICROSHIFT_ROOT}/run/microshift-greenboot"
MICROSHIFT_DATA_RESTORE="${MICROSHIFT_ROOT}/usr/libexec/microshift-greenboot/microshift-data-restore"
MICROSHIFT_DEFAULT_WAIT_TIMEOUT_SEC=300

# Read /etc/greenboot/greenboot.conf (GREENBOOT_MAX_BOOT_ATTEMPTS, MICROSHIFT_WAIT_TIMEOUT_SEC).
function load_greenboot_conf() {
    if [ -f "${GREENBOOT_CONF}" ] ; then
        # shellcheck source=/dev/null
        source "${GREENBOOT_CONF}"
    fi
}

# Print the grubenv boot_counter, or nothing when it is unset.
function grub_boot_counter() {
    { grub2-editenv - list 2>/dev/null || true; } | sed -n 's/^boot_counter=//p' | head -n 1
}

# Print how long this boot may wait for MicroShift: the base timeout times the number of the
# boot attempt, base * (max_boot_attempts - boot_counter), so a device on a slow link that
# needs longer to pull images gets more time on each retry instead of a false rollback.
# greenboot sets boot_counter=max on upgrade and grub decrements it before each attempt.
function wait_timeout_seconds() {
    load_greenboot_conf
    local base="${MICROSHIFT_WAIT_TIMEOUT_SEC:-${MICROSHIFT_DEFAULT_WAIT_TIMEOUT_SEC}}"
    local max="${GREENBOOT_MAX_BOOT_ATTEMPTS:-3}"
    if [[ ! "${base}" =~ ^[1-9][0-9]{0,3}$ ]] ; then
        echo "MICROSHIFT_WAIT_TIMEOUT_SEC='${base}' in ${GREENBOOT_CONF} is not a number of" \
            "seconds in [1..9999]: using ${MICROSHIFT_DEFAULT_WAIT_TIMEOUT_SEC}" >&2
        base="${MICROSHIFT_DEFAULT_WAIT_TIMEOUT_SEC}"
    fi
    if [[ ! "${max}" =~ ^[1-9]$ ]] ; then
        echo "GREENBOOT_MAX_BOOT_ATTEMPTS='${max}' in ${GREENBOOT_CONF} is not in [1..9]:" \
            "using 3" >&2
        max=3
    fi
    local counter
    counter="$(grub_boot_counter)"
    # No counter: not an upgrade boot (first boot or a reboot of a healthy system): one base.
    if [[ ! "${counter}" =~ ^-?[0-9]+$ ]] ; then
        counter=$(( max - 1 ))
    fi
    local timeout=$(( base * (max - counter) ))
    if [ "${timeout}" -le 0 ] ; then
        timeout="${base}"
    fi
    echo "${timeout}"
}

# Milliseconds since the epoch (GNU date).
function now_ms() {
    date +%s%3N
}

# Run a command once a second until it succeeds or the deadline (epoch milliseconds) passes.
# arg1: deadline; argN: the command. Returns 0 once the command succeeded, 1 at the deadline.
function wait_until() {
    local -r deadline="$1"
    shift
    until "$@" ; do
        local now
        now="$(now_ms)"
        if [ "${now}" -ge "${deadline}" ] ; then
            return 1
        fi
        local left=$(( deadline - now ))
        if [ "${left}" -gt 1000 ] ; then
            left=1000
        fi
        sleep "$(( left / 1000 )).$(printf '%03d' $(( left % 1000 )))"
    done
    return 0
}

# Print the value of the first `KEY: value` line of a kubeconfig (quotes removed). MicroShift
# writes a kubeconfig with one cluster and one user, so the first match is the one.
function kubeconfig_value() {
    sed -n "s/^[[:space:]]*$1:[[:space:]]*//p" "$2" | head -n 1 | tr -d "\"'"
}

# Set API_URL and CURL_OPTS from MicroShift's kubeconfig (server, CA and client certificate).
# MICROSHIFT_API_URL overrides the server. Fails while the kubeconfig does not exist yet.
function api_init() {
    API_URL="${MICROSHIFT_API_URL:-}"
    CURL_OPTS=(--silent --show-error --fail --connect-timeout 2 --max-time 5)
    if [ ! -r "${MICROSHIFT_KUBECONFIG}" ] ; then
        [ -n "${API_URL}" ]
        return
    fi
    if [ -z "${API_URL}" ] ; then
        API_URL="$(kubeconfig_value server "${MICROSHIFT_KUBECONFIG}")"
    fi
    local -r certs="${MICROSHIFT_GREENBOOT_RUN_DIR}/api"
    mkdir -p "${certs}"
    chmod 0700 "${certs}"
    local key file value
    for key in certificate-authority-data client-certificate-data client-key-data ; do
        file="${certs}/${key}.pem"
        value="$(kubeconfig_value "${key}" "${MICROSHIFT_KUBECONFIG}")"
        rm -f "${file}"
        if [ -n "${value}" ] ; then
            (umask 077 && printf '%s' "${value}" | base64 -d >"${file}")
        fi
    done
    [ -s "${certs}/certificate-authority-data.pem" ] &&
        CURL_OPTS+=(--cacert "${certs}/certificate-authority-data.pem")
    [ -s "${certs}/client-certificate-data.pem" ] &&
        CURL_OPTS+=(--cert "${certs}/client-certificate-data.pem")
    [ -s "${certs}/client-key-data.pem" ] &&
        CURL_OPTS+=(--key "${certs}/client-key-data.pem")
    [ -n "${API_URL}" ]
}

# GET a path of the MicroShift API and print the body; fails on any HTTP error.
function api_get() {
    if [ -z "${API_URL:-}" ] ; then
        api_init || return 1
    fi
    curl "${CURL_OPTS[@]}" "${API_URL%/}$1"
}

# The API server answers /readyz and /livez with "ok" once every check passes (upstream's
# check asks both: an API server that is ready but not live is restarting).
function api_ready() {
    local endpoint body
    for endpoint in /readyz /livez ; do
        body="$(api_get "${endpoint}" 2>/dev/null)" || return 1
        [ "${body}" = "ok" ] || return 1
    done
}

# Does this package back up and restore MicroShift's data (microshift-data-restore.service)?
# It ships the service only for releases whose binary does not do it itself at start
# (release.yaml components.core.data_backup: greenboot); MicroShift 4.14 and later back up
# and restore in their pre-run and own health.json.
function shell_data_backup() {
    [ -x "${MICROSHIFT_DATA_RESTORE}" ]
}

# Print the "namespace kind name" lines given as arguments whose workload is not fully ready.
# Deployments and statefulsets: readyReplicas == spec.replicas (> 0); daemonsets:
# numberReady == desiredNumberScheduled (> 0). Crash-looping pods are never ready; a workload
# the API does not answer for is not ready. One curl asks for all of them and one jq judges
# every answer: on a slow edge CPU (and under emulation) starting a process costs more than
# the request, and the check runs inside a boot's time limit.
function workloads_not_ready() {
    [ "$#" -gt 0 ] || return 0
    if [ -z "${API_URL:-}" ] && ! api_init ; then
        printf '%s\n' "$@"
        return 0
    fi
    local -r dir="${MICROSHIFT_GREENBOOT_RUN_DIR}/workloads"
    rm -rf "${dir}"
    mkdir -p "${dir}"
    local -a fetch=()
    local line ns kind name index=0
    for line in "$@" ; do
        read -r ns kind name <<<"${line}"
        # The kind is in the file's name: it decides which status fields count.
        fetch+=(-o "${dir}/${index}.${kind}.json"
                "${API_URL%/}/apis/apps/v1/namespaces/${ns}/${kind}s/${name}")
        index=$(( index + 1 ))
    done
    # curl goes on after a failed transfer; a failed one (--fail) leaves no file.
    curl "${CURL_OPTS[@]}" "${fetch[@]}" >/dev/null 2>&1 || true
    local -a ready=()
    mapfile -t ready < <(cd "${dir}" && find . -name '*.json' -size +0 -printf '%f\0' |
        xargs -0r jq -r 'select(if (input_filename | endswith(".daemonset.json"))
                then [.status.desiredNumberScheduled // 0, .status.numberReady // 0]
                else [.spec.replicas // 1, .status.readyReplicas // 0] end
            | .[0] > 0 and .[1] == .[0]) | input_filename | split(".")[0]' 2>/dev/null)
    index=0
    for line in "$@" ; do
        [[ " ${ready[*]} " == *" ${index} "* ]] || echo "${line}"
        index=$(( index + 1 ))
    done
    rm -rf "${dir}"
}

# Print the health lists to check: core's, then each installed component's healthcheck.list in
# the plugin order (NNN-name), so a new component needs no change to the check.
function health_lists() {
    [ -f "${MICROSHIFT_CORE_HEALTH_LIST}" ] && echo "${MICROSHIFT_CORE_HEALTH_LIST}"
    local list
    for list in "${MICROSHIFT_COMPONENTS_DIR}"/*/healthcheck.list ; do
        [ -f "${list}" ] && echo "${list}"
    done
    return 0
}

# Print every workload as "namespace kind name" lines. A line that is not three fields with a
# known kind fails with file:line, because a check that cannot say what to wait for cannot
# vouch for the boot.
function health_workloads() {
    local list number ns kind name extra
    while read -r list ; do
        number=0
        while read -r ns kind name extra || [ -n "${ns}" ] ; do
            number=$(( number + 1 ))
            [ -z "${ns}" ] || [ "${ns:0:1}" = "#" ] && continue
            if [ -z "${name}" ] || [ -n "${extra}" ] ||
                    [[ ! "${kind}" =~ ^(deployment|daemonset|statefulset)$ ]] ; then
                echo "${list#"${MICROSHIFT_ROOT}"}:${number}: expected 'namespace kind name'" \
                    "with kind deployment, daemonset or statefulset" >&2
                return 1
            fi
            echo "${ns} ${kind} ${name}"
        done <"${list}"
    done < <(health_lists)
}

# Print the id (checksum.serial) of the booted ostree deployment: the deployment whose /usr is
# the booted /usr (same device and inode, as ostree itself finds the booted deployment).
function booted_deployment_id() {
    [ -e "${MICROSHIFT_ROOT}/run/ostree-booted" ] || return 1
    local usr_id deploy
    usr_id="$(stat -L -c '%d:%i' "${MICROSHIFT_ROOT}/usr")" || return 1
    for deploy in "${MICROSHIFT_ROOT}"/sysroot/ostree/deploy/*/deploy/*/ ; do
        [ -d "${deploy}usr" ] || continue
        if [ "$(stat -c '%d:%i' "${deploy}usr")" = "${usr_id}" ] ; then
            basename "${deploy}"
            return 0
        fi
    done
    return 1
}

# Print the ids of every deployment on the sysroot.
function deployment_ids() {
    local deploy
    for deploy in "${MICROSHIFT_ROOT}"/sysroot/ostree/deploy/*/deploy/*/ ; do
        [ -d "${deploy}" ] && basename "${deploy}"
    done
    return 0
}

function current_boot_id() {
    tr -d '-' <"${MICROSHIFT_ROOT}/proc/sys/kernel/random/boot_id"
}

# Record this boot's verdict for the next boot's microshift-data-restore:
# health.json {"health": healthy|unhealthy, "deployment_id": ..., "boot_id": ...}.
function record_health() {
    local -r health="$1"
    local deployment boot
    deployment="$(booted_deployment_id)" || deployment=""
    boot="$(current_boot_id)" || boot=""
    mkdir -p "${MICROSHIFT_BACKUP_DIR}"
    jq -n --arg health "${health}" --arg deploy "${deployment}" --arg boot "${boot}" \
        '{health: $health, deployment_id: $deploy, boot_id: $boot}' \
        >"${MICROSHIFT_BACKUP_DIR}/health.json.tmp"
    mv -f "${MICROSHIFT_BACKUP_DIR}/health.json.tmp" "${MICROSHIFT_BACKUP_DIR}/health.json"
    echo "Recorded MicroShift health '${health}' for deployment '${deployment:-unknown}'" \
        "boot '${boot:-unknown}'"
}

# Print the GRUB boot variables and the greenboot settings: what decides retries and rollback.
function print_boot_status() {
    load_greenboot_conf
    local grub_vars
    grub_vars="$({ grub2-editenv - list 2>/dev/null || true; } | grep '^boot_' || true)"
    echo "GRUB boot variables: ${grub_vars//$'\n'/ }"
    echo "Greenboot settings: GREENBOOT_MAX_BOOT_ATTEMPTS=${GREENBOOT_MAX_BOOT_ATTEMPTS:-3}" \
        "MICROSHIFT_WAIT_TIMEOUT_SEC=${MICROSHIFT_WAIT_TIMEOUT_SEC:-${MICROSHIFT_DEFAULT_WAIT_TIMEOUT_SEC}}"
}
