#!/bin/bash
#
# greenboot red.d: note this boot's result for the verdict of a staged rollout update
# (microshift-update reports it to the fleet's collector at its next run). Never fails:
# the boot's verdict is greenboot's, this only records it.
set -uo pipefail

"${MICROSHIFT_ROOT:-}/usr/bin/microshift-update" --root "${MICROSHIFT_ROOT:-/}" note red || true
