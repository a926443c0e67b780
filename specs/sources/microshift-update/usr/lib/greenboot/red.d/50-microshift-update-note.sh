#!/bin/bash
#
# greenboot red.d: note this boot's result for the verdict of a staged rollout update
# (microshift-update reports it to the fleet's collector at its next run). Never fails:
# the boot's verdict is greenboot's, this only records it.
set -uo pipefail

# Only a staged rollout update has an outcome to note (builder/updater/outcome.py): without
# one, the updater is not started at all (a Python start costs seconds of every boot on a
# slow edge CPU, and a red boot reboots only after red.d).
[ -f "${MICROSHIFT_ROOT:-}/var/lib/microshift-update/outcome.json" ] || exit 0
"${MICROSHIFT_ROOT:-}/usr/bin/microshift-update" --root "${MICROSHIFT_ROOT:-/}" note red || true
