#!/bin/bash
# hello-lab setup. lab-agent runs it once, as root, through a login shell,
# with LAB_DIR set to where the lab's files are (/opt/lab in a VM, a staged
# copy under `labctl try`). It is safe to run again: every run puts the lab
# back in its starting state.
#
# Outside $LAB_DIR it touches only what it owns: the `student` user (created
# if missing, with its home) and /etc/profile.d/hello-lab-banner.sh.
# `cleanup.sh` beside this file removes both (needed only after `labctl try
# --host` or a run by hand: `labctl try` runs it in a throwaway sandbox).
set -euo pipefail

log() { printf 'hello-lab setup: %s\n' "$*"; }
die() { printf 'hello-lab setup: error: %s\n' "$*" >&2; exit 1; }

[ -n "${LAB_DIR:-}" ] || die 'LAB_DIR is not set: run me through lab-agent, or as `LAB_DIR=$PWD/files ./setup.sh`'
[ -d "$LAB_DIR" ] || die "LAB_DIR=$LAB_DIR is not a folder"
[ "$(id -u)" -eq 0 ] || die "must run as root (it creates the \`student\` user)"

banner=/etc/profile.d/hello-lab-banner.sh

# Optional slowdown, to watch a VM sit in `setting_up`: seconds, from
# $HELLO_LAB_SETUP_DELAY (running this script by hand) or from the file
# $LAB_DIR/setup-delay-secs (through lab-agent, which gives setup a clean
# environment).
delay=${HELLO_LAB_SETUP_DELAY:-}
if [ -z "$delay" ] && [ -f "$LAB_DIR/setup-delay-secs" ]; then
    delay=$(tr -dc '0-9' <"$LAB_DIR/setup-delay-secs")
fi

# 1. The student's account.
if id -u student >/dev/null 2>&1; then
    log "user student exists"
elif command -v useradd >/dev/null; then
    useradd --create-home --shell /bin/bash student
    log "created user student"
else
    adduser -D -s /bin/sh student # busybox
    log "created user student"
fi
home=$(getent passwd student | cut -d: -f6)
group=$(id -gn student)
install -d -o student -g "$group" -m 0755 "$home"

# 2. The student's files, from $LAB_DIR. hello.sh is deliberately not
#    executable: making it so is the student's task.
install -o student -g "$group" -m 0644 "$LAB_DIR/welcome.txt" "$home/welcome.txt"
install -o student -g "$group" -m 0644 "$LAB_DIR/hello.sh" "$home/hello.sh"
log "put welcome.txt and hello.sh in $home"

# 3. A login banner for the student's interactive shells only.
install -m 0644 "$LAB_DIR/profile-banner.sh" "$banner"
log "installed $banner"

if [ -n "$delay" ] && [ "$delay" -gt 0 ]; then
    log "sleeping ${delay}s (setup-delay-secs)"
    sleep "$delay"
fi
log "done"
