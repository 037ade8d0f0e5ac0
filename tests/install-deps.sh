#!/usr/bin/env bash
# Installs what the test suite needs on a Debian 12 machine, idempotently
# (seconds when nothing is missing), leaving the host's boot and its system
# Python as they were:
# - the musl targets (the static agent for amd64 and arm64), rustfmt, clippy;
# - into the lab-agent cache: Debian's user-mode qemu-aarch64, unpacked, not
#   installed (tests/qemu-user.sh: the package would register binfmt
#   handlers), which runs the arm64 agent's tests;
# - into the lab-agent cache, not the system (tests/pydeps.sh): Debian's
#   cloud-init unpacked for its schema checker and loader (the package is not
#   installed, no service enabled), and the PyPI validators kubernetes-validate
#   and schemathesis, with maturin and pytest for the Python package, in a
#   virtualenv; and Debian's skopeo, umoci and xorriso, unpacked
#   (tests/image-tools.sh);
# - system-wide, as Debian packages that start and enable no service:
#   python3-venv (to make that virtualenv), and the VM tools with the cached
#   guest images (tests/vm/build-image.sh: qemu from bookworm-backports,
#   mmdebstrap, cloud-image-utils, genisoimage);
# - into the lab-agent cache, built with `cargo install --root`
#   (tests/vhost-vsock.sh): rust-vmm's vhost-device-vsock, the guests'
#   virtio-vsock device in the VM tests and `labctl try --vm`;
# - the static agents: amd64 (the VM tests boot it), arm64 (its tests run it
#   under qemu-user).
# Needs root for apt when a package is missing; nothing is downloaded at test
# time. README.md says why each system package is there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
log() { printf 'install-deps: %s\n' "$*" >&2; }

for target in x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
  if ! rustup target list --installed | grep -qx "$target"; then
    log "adding rustup target $target"
    rustup target add "$target"
  fi
done
for c in rustfmt clippy; do
  rustup component list --installed | grep -q "^$c" || rustup component add "$c"
done

"$root/tests/apt-install.sh" python3-venv mmdebstrap cloud-image-utils genisoimage

# cloud-init and the PyPI validators, in the cache.
"$root/tests/pydeps.sh"
# skopeo, umoci, xorrisofs: the agent's disk read back as an operator
# reads it, and a ConfigMap's disk made as KubeVirt makes it (in the cache).
"$root/tests/image-tools.sh" >/dev/null

# The guest images for the VM tests (cached; ~2 min each cold: Debian 12 and
# Debian 13) and the static agent they boot with.
for guest in debian-12 debian-13; do
  "$root/tests/vm/build-image.sh" --guest "$guest" >/dev/null
done
"$root/tests/qemu-user.sh" >/dev/null
"$root/tests/vhost-vsock.sh" >/dev/null
"$root/packaging/build-agent.sh" >/dev/null
"$root/packaging/build-agent.sh" --arch arm64 >/dev/null
log "done"
