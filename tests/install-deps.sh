#!/usr/bin/env bash
# Installs what the test suite needs on a Debian 12 machine, idempotently:
# the musl target (static agent), Debian's cloud-init (its schema checker and
# loader; no service is started or enabled), the VM tools and guest image
# (tests/vm/build-image.sh installs qemu from bookworm-backports itself), and
# the PyPI validators. Needs root for apt; nothing is downloaded at test time.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
log() { printf 'install-deps: %s\n' "$*" >&2; }

if ! rustup target list --installed | grep -qx x86_64-unknown-linux-musl; then
  log "adding rustup target x86_64-unknown-linux-musl"
  rustup target add x86_64-unknown-linux-musl
fi
for c in rustfmt clippy; do
  rustup component list --installed | grep -q "^$c" || rustup component add "$c"
done

"$root/tests/apt-install.sh" cloud-init python3-yaml mmdebstrap cloud-image-utils genisoimage

py=(kubernetes-validate schemathesis)
for p in "${py[@]}"; do
  python3 -m pip show -q "$p" >/dev/null 2>&1 || { log "pip install $p"; python3 -m pip install -q "$p"; }
done

# The guest image for the VM tests (cached; ~1 min cold) and the static agent
# they boot with.
"$root/tests/vm/build-image.sh" >/dev/null
"$root/packaging/build-agent.sh" >/dev/null
log "done"
