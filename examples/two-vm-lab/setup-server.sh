#!/bin/bash
# two-vm-lab, VM `server`: a small web service bound to loopback only, so
# that `client` cannot reach it until the student changes its bind address.
# Run once, as root, by lab-agent (LAB_DIR, LAB_VM, LAB_VMS set).
set -euo pipefail
. "$LAB_DIR/common.sh"
[ "$LAB_VM" = server ] || die "this is server's setup, and this VM is ${LAB_VM:-unnamed}"

install -d -m 0755 /srv/greeting
printf 'hello from %s\n' "$LAB_VM" >/srv/greeting/index.html
printf 'GREETING_BIND=127.0.0.1\n' >/etc/default/greeting
install -m 0644 "$LAB_DIR/greeting.service" /etc/systemd/system/greeting.service
greeting_restart
log "greeting.service answers on 127.0.0.1:8080 only"
