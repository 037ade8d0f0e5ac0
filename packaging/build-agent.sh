#!/usr/bin/env bash
# Builds the static, stripped lab-agent that cloud-init ships into lab VMs,
# verifies that it is static, and reports its size and gzip size.
#
#   packaging/build-agent.sh            # -> target/x86_64-unknown-linux-musl/agent/lab-agent
#   packaging/build-agent.sh --print-path
#
# The `agent` profile (root Cargo.toml) trades a little speed for size: every
# byte of the agent is base64'd into the user-data that cloud-init parses on
# first boot.
set -euo pipefail

target=x86_64-unknown-linux-musl
root=$(cd "$(dirname "$0")/.." && pwd)
out="${CARGO_TARGET_DIR:-$root/target}/$target/agent/lab-agent"

if [ "${1:-}" = "--print-path" ]; then
  echo "$out"
  exit 0
fi

if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
  echo "adding rustup target $target" >&2
  rustup target add "$target" >&2
fi

# The agent is a static PIE: the kernel loads it anywhere and musl's start
# code relocates it. Its ~1,850 relocations (pointers in static data: format
# tables, vtables) cost 24 bytes each as RELA, 44 KiB: a first page-aligned
# segment of the file, where one more pointer anywhere cost a whole 4 KiB
# page. `-z pack-relative-relocs` writes them as RELR (a base address and
# bitmaps: 576 bytes), which musl ≥ 1.2.4 (Rust's bundled 1.2.5) applies at
# start; ASLR stays. Checked below by running the binary.
export CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_RUSTFLAGS="-C link-arg=-Wl,-z,pack-relative-relocs"
cargo build --manifest-path "$root/Cargo.toml" -p lab-agent --bin lab-agent \
  --profile agent --target "$target" --locked >&2

# Static means: no program interpreter and no dynamic section.
if readelf -lW "$out" | grep -q 'Requesting program interpreter'; then
  echo "error: $out is dynamically linked (it has a program interpreter)" >&2
  exit 1
fi
if readelf -dW "$out" 2>/dev/null | grep -q 'NEEDED'; then
  echo "error: $out needs shared libraries:" >&2
  readelf -dW "$out" | grep NEEDED >&2
  exit 1
fi

if ! readelf -SW "$out" | grep -q '\.relr\.dyn'; then
  echo "error: $out has no packed relocations (.relr.dyn): is RUSTFLAGS set? it overrides the target's flags" >&2
  exit 1
fi
# Its start code must have applied them: a binary whose relocations were
# not applied crashes on its first formatted line.
if ! "$out" version >/dev/null; then
  echo "error: $out does not run (\`$out version\` failed)" >&2
  exit 1
fi

size=$(stat -c %s "$out")
gz=$(gzip -9 -c "$out" | wc -c)
printf 'lab-agent: %s\n' "$out" >&2
kib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1024 }'; }
printf '  static, stripped: %d bytes (%s KiB)\n' "$size" "$(kib "$size")" >&2
printf '  gzip -9:          %d bytes (%s KiB)\n' "$gz" "$(kib "$gz")" >&2
printf '  base64 of gzip:   ~%d bytes (what the user-data carries)\n' "$(( (gz + 2) / 3 * 4 ))" >&2
echo "$out"
