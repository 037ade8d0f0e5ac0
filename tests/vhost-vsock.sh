#!/usr/bin/env bash
# Installs rust-vmm's `vhost-device-vsock` (crates.io) into the lab-agent
# cache and prints its path: the device model of the guests' virtio-vsock
# device (qemu's `vhost-user-vsock-pci`) in the VM tests and `labctl try
# --vm` (runner/src/qemu/vsock.rs looks for it there, after
# $LAB_AGENT_VHOST_DEVICE_VSOCK and PATH). Nothing is installed system-wide
# and no kernel module is needed (qemu's `vhost-vsock-pci` would need
# `vhost_vsock`, which a host that is itself a VM seldom has).
#
#   tests/vhost-vsock.sh            build it unless cached; print its path
#   tests/vhost-vsock.sh --cached   print the cached one's path; exit 1 if none
#
# `cargo install --locked --root CACHE/vhost-device-vsock` of a pinned
# version, built in a temporary target dir that is removed after (~3 min
# on 2 cores, ~6 MB kept). Needs the network on a cold run.
#
# Layout, under ${LAB_AGENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lab-agent}:
#   vhost-device-vsock/bin/vhost-device-vsock
#   vhost-device-vsock/version            the version installed
set -euo pipefail

version=0.3.0

log() { printf 'vhost-vsock: %s\n' "$*" >&2; }
die() {
  printf 'vhost-vsock: error: %s\n' "$1" >&2
  [ $# -lt 2 ] || printf 'hint: %s\n' "$2" >&2
  exit 1
}

cache_root=${LAB_AGENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lab-agent}
dir=$cache_root/vhost-device-vsock
bin=$dir/bin/vhost-device-vsock

cached() { [ -x "$bin" ] && [ "$(cat "$dir/version" 2>/dev/null)" = "$version" ]; }

case "${1:-}" in
--cached)
  cached || exit 1
  echo "$bin"
  exit 0
  ;;
"") ;;
-h | --help)
  sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 0
  ;;
*) die "unknown argument \`$1\`" "see \`$0 --help\`" ;;
esac

if cached; then
  echo "$bin"
  exit 0
fi

mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
if cached; then # another run built it while we waited
  echo "$bin"
  exit 0
fi

work=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
log "building vhost-device-vsock $version (cargo install, once)"
CARGO_TARGET_DIR=$work/target cargo install --quiet --locked --force \
  --root "$dir" --version "$version" vhost-device-vsock >&2 ||
  die "cannot build vhost-device-vsock $version" "is the network up (crates.io)?"
"$bin" --help >/dev/null || die "the built vhost-device-vsock does not run"
echo "$version" >"$dir/version"
log "vhost-device-vsock $version in $dir"
echo "$bin"
