#!/usr/bin/env bash
# The benchmark, in one command (as root, on a Debian 12 machine):
#
#   bench/run.sh                 # prints the tables of BENCHMARKS.md
#   bench/run.sh --rounds 50     # extra flags go to lab-agent-bench (--help)
#
# Idempotently installs the peers (openssh-server, qemu-guest-agent, wrk;
# no service is started: a policy-rc.d forbids it), creates the bench user
# `labbench` (no password, `*` so sshd accepts its key, empty home; removed
# at the end unless it was there before), builds
# the shipped static agent (packaging/build-agent.sh) and the bench, then
# runs it. The bench starts every peer on loopback itself, in a temp dir,
# and stops all of them when it ends, fails, is interrupted or hits its time
# limit (--time-limit, default 600 s). The report is also written to
# target/bench-report.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
log() { printf 'bench/run.sh: %s\n' "$*" >&2; }

# Help changes nothing: no package, no user, no agent build, no root.
for arg in "$@"; do
  case $arg in
  -h | --help)
    cargo build --manifest-path "$root/Cargo.toml" --release --locked --quiet \
      -p lab-agent-bench --bin lab-agent-bench >&2
    sed -n '2,15s/^# \{0,1\}//p' "$0"
    echo
    exec "${CARGO_TARGET_DIR:-$root/target}/release/lab-agent-bench" --help
    ;;
  --) break ;;
  esac
done

if [ "$(id -u)" != 0 ]; then
  echo "error: bench/run.sh must run as root (it installs packages, starts sshd and switches users)" >&2
  exit 1
fi

# The peers.
"$root/tests/apt-install.sh" openssh-server openssh-client qemu-guest-agent wrk gzip util-linux

# The bench user: every variant runs its shell as this user, whose home is
# empty so the login shell reads only the system profile.
user=labbench
home=/var/lib/labbench
# A user this run creates, it removes when it ends: the machine keeps no
# account of the bench's.
created_user=
if ! id "$user" >/dev/null 2>&1; then
  log "creating user $user (removed at the end)"
  useradd --system --no-create-home --home-dir "$home" --shell /bin/bash "$user"
  created_user=$user
fi
remove_user() {
  [ -n "$created_user" ] || return 0
  pkill -KILL -u "$created_user" 2>/dev/null || true
  userdel "$created_user" 2>/dev/null || log "could not remove user $created_user: userdel $created_user"
  rm -rf "$home"
}
trap remove_user EXIT
# A locked password (`!`) makes sshd refuse even key auth; `*` does not.
[ "$(getent shadow "$user" | cut -d: -f2)" = "*" ] || usermod -p '*' "$user"
install -d -o "$user" -g "$(id -gn "$user")" -m 0750 "$home"
find "$home" -mindepth 1 -delete

# What ships, and the bench.
log "building the static agent"
agent=$("$root/packaging/build-agent.sh")
log "building lab-agent-bench and labctl"
cargo build --manifest-path "$root/Cargo.toml" --release --locked \
  -p lab-agent-bench -p labctl --bin lab-agent-bench --bin labctl >&2
bin=${CARGO_TARGET_DIR:-$root/target}/release

cd "$root"
# The bench cleans up after itself, also on SIGINT/SIGTERM and at its time
# limit, and its children die with it even when it is SIGKILLed; its temp
# dir lives in ours, which goes in any case.
work=$(mktemp -d /tmp/lab-agent-bench-run.XXXXXX)
chmod 0755 "$work" # qemu-ga runs as the bench user and needs its socket dir
TMPDIR=$work "$bin/lab-agent-bench" --agent "$agent" --labctl "$bin/labctl" \
  --lab examples/hello-lab --user "$user" \
  --report "${CARGO_TARGET_DIR:-$root/target}/bench-report.md" "$@" &
bench=$!
trap 'kill -TERM "$bench" 2>/dev/null' INT TERM HUP
trap 'rm -rf "$work"; remove_user' EXIT
status=0
while :; do
  wait "$bench" && status=0 || status=$?
  # A trapped signal interrupts `wait` with a status above 128; go on
  # waiting until the bench itself has stopped.
  kill -0 "$bench" 2>/dev/null || break
done
exit "$status"
