#!/bin/bash
#
# greenboot green.d: the boot passed its health checks. Record it, so that the next boot's
# microshift-data-restore service backs up this deployment's data before MicroShift starts.
set -euo pipefail

# shellcheck source=usr/share/microshift/functions/greenboot.sh
source "${MICROSHIFT_ROOT:-}/usr/share/microshift/functions/greenboot.sh"

echo "STARTED"
record_health healthy
echo "FINISHED"
