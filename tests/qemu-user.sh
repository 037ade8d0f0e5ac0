#!/usr/bin/env bash
# Puts Debian's user-mode `qemu-aarch64` (the static build, from the
# `qemu-user-static` package) into the lab-agent cache and prints its path:
# it runs the aarch64 agent on this x86_64 machine for the tests
# (tests/tests/arm64.rs) and for packaging/build-agent.sh's run check.
#
#   tests/qemu-user.sh            fetch it unless cached; print its path
#   tests/qemu-user.sh --cached   print the cached one's path; exit 1 if none
#
# The package is fetched with `apt-get download` and only its
# `qemu-aarch64-static` is unpacked (`dpkg-deb --fsys-tarfile`): the package
# is never installed, because its postinst registers every qemu with
# binfmt_misc, after which the host would run foreign binaries behind
# everyone's back. Callers run it explicitly: `qemu-aarch64 ./lab-agent …`.
#
# Layout, under ${LAB_AGENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lab-agent}:
#   qemu-user/<package version>/qemu-aarch64
#   qemu-user/current -> <package version>
# Needs the network on a cold run (~63 MB download, 13 MB kept), and root
# only if the apt package lists are missing or stale (one `apt-get update`).
set -euo pipefail

log() { printf 'qemu-user: %s\n' "$*" >&2; }
die() {
  printf 'qemu-user: error: %s\n' "$1" >&2
  [ $# -lt 2 ] || printf 'hint: %s\n' "$2" >&2
  exit 1
}

cache_root=${LAB_AGENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lab-agent}
dir=$cache_root/qemu-user
current=$dir/current/qemu-aarch64

case "${1:-}" in
--cached)
  [ -x "$current" ] || exit 1
  echo "$current"
  exit 0
  ;;
"") ;;
-h | --help)
  sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 0
  ;;
*) die "unknown argument \`$1\`" "see \`$0 --help\`" ;;
esac

if [ -x "$current" ]; then
  echo "$current"
  exit 0
fi

mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
if [ -x "$current" ]; then # another run fetched it while we waited
  echo "$current"
  exit 0
fi

work=$(mktemp -d "$dir/.fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
# `apt-get download` writes as the _apt user where it can: give it a
# directory it may write to.
chmod 0777 "$work"
download() { (cd "$work" && apt-get -q download qemu-user-static >&2); }
if ! download; then
  log "refreshing the apt package lists"
  apt-get -q update >&2 || die "cannot refresh the apt package lists" "run \`apt-get update\` as root, then retry"
  download || die "cannot download qemu-user-static" "is the network up and Debian's main archive in the apt sources?"
fi
deb=$(ls "$work"/qemu-user-static_*.deb)
version=$(dpkg-deb -f "$deb" Version)
# The version names a directory: an epoch's colon is fine there.
mkdir -p "$work/x"
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work/x" ./usr/bin/qemu-aarch64-static
"$work/x/usr/bin/qemu-aarch64-static" --version >/dev/null || die "the unpacked qemu-aarch64-static does not run"
mkdir -p "$dir/$version"
mv "$work/x/usr/bin/qemu-aarch64-static" "$dir/$version/qemu-aarch64"
ln -sfn "$version" "$dir/.current.tmp"
mv -T "$dir/.current.tmp" "$dir/current"
log "qemu-aarch64 $version in $dir/$version"
echo "$current"
