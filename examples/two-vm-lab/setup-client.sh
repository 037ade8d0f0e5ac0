#!/bin/bash
# two-vm-lab, VM `client`: waits until every other VM of the session
# resolves by name (the platform's job: a headless Service and `subdomain`
# on KubeVirt), so the student starts with a working network.
set -euo pipefail
. "$LAB_DIR/common.sh"
for vm in $LAB_VMS; do
	[ "$vm" != "$LAB_VM" ] || continue
	wait_for_name "$vm" 120
done
log "every VM of the session resolves: $LAB_VMS"
