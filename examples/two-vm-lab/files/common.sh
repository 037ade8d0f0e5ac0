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
