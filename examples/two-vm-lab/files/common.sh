# two-vm-lab: helpers every VM's setup sources (". "$LAB_DIR/common.sh"").
log() { printf 'two-vm-lab setup (%s): %s\n' "${LAB_VM:-?}" "$*"; }
die() { printf 'two-vm-lab setup (%s): error: %s\n' "${LAB_VM:-?}" "$*" >&2; exit 1; }
[ -n "${LAB_VM:-}" ] || die 'LAB_VM is not set: render each VM with `labctl secret --vm NAME`'

# wait_for_name NAME SECS: until NAME resolves, or fail after SECS.
wait_for_name() {
	local i
	for ((i = 0; i < $2; i++)); do
		getent hosts "$1" >/dev/null && return 0
		sleep 1
	done
	die "$1 does not resolve after $2 s: the VMs of a session must find each other by name"
}

# greeting_restart: (re)starts the greeting service with the bind address
# of /etc/default/greeting, and waits until it listens. On a VM that is
# systemd's job; where systemd does not run (`labctl try`'s and `labctl
# test`'s sandbox) the unit's command is started here, in the background,
# its PID in /run/greeting.pid.
greeting_restart() {
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload
		systemctl enable greeting.service
		systemctl restart greeting.service
	else
		if [ -s /run/greeting.pid ]; then
			kill "$(cat /run/greeting.pid)" 2>/dev/null || true
			wait_for_port free
		fi
		. /etc/default/greeting
		setsid /usr/bin/python3 -m http.server --bind "$GREETING_BIND" \
			--directory /srv/greeting 8080 </dev/null >/dev/null 2>&1 &
		echo $! >/run/greeting.pid
	fi
	wait_for_port listening
}

# wait_for_port listening|free: until something (nothing) listens on 8080.
wait_for_port() {
	local i
	for ((i = 0; i < 100; i++)); do
		if ss -Hltn "sport = :8080" | grep -q .; then
			[ "$1" = free ] || return 0
		else
			[ "$1" = listening ] || return 0
		fi
		sleep 0.1
	done
	die "port 8080 is not $1 after 10 s"
}
