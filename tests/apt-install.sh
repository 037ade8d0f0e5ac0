#!/usr/bin/env bash
# Installs the Debian packages named as arguments that are not installed yet,
# without Recommends, and without starting or enabling any service they ship
# (a policy-rc.d forbids it while they install): the test and bench machines
# must not be reconfigured by cloud-init, sshd or qemu-ga.
#
#   tests/apt-install.sh PACKAGE...
set -euo pipefail

missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
[ ${#missing[@]} -gt 0 ] || exit 0

printf '%s: installing %s\n' "$(basename "$0")" "${missing[*]}" >&2
made_policy=
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  made_policy=1
fi
trap '[ -z "$made_policy" ] || rm -f /usr/sbin/policy-rc.d' EXIT
export DEBIAN_FRONTEND=noninteractive
install() {
  apt-get -q -y -o DPkg::Lock::Timeout=600 install --no-install-recommends "${missing[@]}" >&2
}
# The package lists may be missing or stale on a fresh machine.
install || { apt-get -q update >&2 && install; }
