#!/usr/bin/env bash
# Builds the static, stripped lab-agent that cloud-init ships into lab VMs,
# for one architecture, verifies that it is static (and, where it can run it,
# that it runs) and under 1,000,000 bytes, and reports its size and gzip size.
#
#   packaging/build-agent.sh [--arch amd64|arm64]   # default amd64
#     amd64 -> target/x86_64-unknown-linux-musl/agent/lab-agent
#     arm64 -> target/aarch64-unknown-linux-musl/agent/lab-agent
#   packaging/build-agent.sh [--arch ARCH] --print-path
#
# The path goes to stdout, everything else to stderr.
#
# The `agent` profile (root Cargo.toml) trades a little speed for size: every
# byte of the agent is base64'd into the user-data that cloud-init parses on
# first boot.
#
# arm64 is cross-built without a C cross toolchain: the agent has no C code
# (no build script compiles any), Rust's musl targets bring musl and its
# start files (crt1.o, libc.a) with them, so all that is missing is a linker
# for aarch64, and rustup ships one: `rust-lld` (LLVM's lld, in the
# toolchain's own bin/), called directly as the linker. The host's `cc`
# (the default linker of the musl targets) only links for the host.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
die() {
  printf 'build-agent: error: %s\n' "$1" >&2
  [ $# -lt 2 ] || printf 'hint: %s\n' "$2" >&2
  exit 1
}

arch=amd64
print_path=
while [ $# -gt 0 ]; do
  case "$1" in
  --arch)
    [ $# -ge 2 ] || die "\`--arch\` needs a value" "amd64 or arm64"
    arch=$2
    shift 2
    ;;
  --arch=*)
    arch=${1#--arch=}
    shift
    ;;
  --print-path)
    print_path=1
    shift
    ;;
  -h | --help)
    sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 0
    ;;
  *) die "unknown argument \`$1\`" "see \`$0 --help\`" ;;
  esac
done

case "$arch" in
amd64) target=x86_64-unknown-linux-musl machine='Advanced Micro Devices X86-64' ;;
arm64) target=aarch64-unknown-linux-musl machine=AArch64 ;;
*) die "unknown architecture \`$arch\`" "--arch amd64 (x86_64) or --arch arm64 (aarch64)" ;;
esac
out="${CARGO_TARGET_DIR:-$root/target}/$target/agent/lab-agent"

if [ -n "$print_path" ]; then
  echo "$out"
  exit 0
fi

if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
  echo "adding rustup target $target" >&2
  rustup target add "$target" >&2
fi

# Both agents are linked with packaging/no-unwind-tables.ld: with
# `panic = "abort"` nothing unwinds, and the unwind tables std brings
# anyway were 135,248 bytes of the amd64 agent (the file says why that is
# safe). Checked below. RUSTFLAGS splits on spaces, so the path must have none.
case "$root" in
*[[:space:]]*) die "the repository's path \`$root\` has whitespace, which RUSTFLAGS cannot carry" "build from a checkout without spaces in its path" ;;
esac
no_unwind="-C link-arg=-T$root/packaging/no-unwind-tables.ld"

case "$arch" in
amd64)
  # The x86_64 agent is a static PIE: the kernel loads it anywhere and
  # musl's start code relocates it. Its ~1,850 relocations (pointers in
  # static data: format tables, vtables) cost 24 bytes each as RELA, 44 KiB:
  # a first page-aligned segment of the file, where one more pointer
  # anywhere cost a whole 4 KiB page. `-z pack-relative-relocs` writes them
  # as RELR (a base address and bitmaps: 576 bytes), which musl ≥ 1.2.4
  # (Rust's bundled 1.2.5) applies at start; ASLR stays. Checked below by
  # running the binary.
  export CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_RUSTFLAGS="-C link-arg=-Wl,-z,pack-relative-relocs $no_unwind"
  ;;
arm64)
  # Rust's aarch64-unknown-linux-musl links a static executable at a fixed
  # address, not a static PIE as on x86_64 (the target does not set
  # `static-position-independent-executables`): there are no run-time
  # relocations at all, so nothing to pack, and its code is not placed at
  # random (the stack and the heap still are). Checked below. lld aligns
  # the loadable segments to 64 KiB on aarch64 (its max-page-size there),
  # so one binary loads on 4, 16 and 64 KiB page kernels; checked below too.
  export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=rust-lld
  export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_RUSTFLAGS="$no_unwind"
  ;;
esac
cargo build --manifest-path "$root/Cargo.toml" -p lab-agent --bin lab-agent \
  --profile agent --target "$target" --locked >&2

# The right machine (a wrong --target or a stale file would not be).
if ! readelf -hW "$out" | grep -q "Machine: *$machine\$"; then
  die "$out is not an $arch binary: $(readelf -hW "$out" | grep Machine:)"
fi
# Static means: no program interpreter and no dynamic section.
if readelf -lW "$out" | grep -q 'Requesting program interpreter'; then
  die "$out is dynamically linked (it has a program interpreter)"
fi
if readelf -dW "$out" 2>/dev/null | grep -q 'NEEDED'; then
  readelf -dW "$out" | grep NEEDED >&2
  die "$out needs shared libraries (above)"
fi

# The unwind tables are gone (the start files' 80 bytes of .eh_frame stay).
if readelf -SW "$out" | grep -q '\.gcc_except_table'; then
  die "$out has unwind tables (.gcc_except_table): was it linked with packaging/no-unwind-tables.ld? RUSTFLAGS overrides the target's flags"
fi

case "$arch" in
amd64)
  if ! readelf -SW "$out" | grep -q '\.relr\.dyn'; then
    die "$out has no packed relocations (.relr.dyn): is RUSTFLAGS set? it overrides the target's flags"
  fi
  ;;
arm64)
  # A fixed-address executable with relocations left would be a static
  # PIE without its self-relocating start code: say so instead of shipping it.
  if readelf -rW "$out" | grep -q '^Relocation section'; then
    die "$out has run-time relocations, which its start code does not apply:
$(readelf -rW "$out" | grep '^Relocation section')"
  fi
  # Every LOAD segment aligned to at least 64 KiB (0x10000).
  for align in $(readelf -lW "$out" | awk '$1 == "LOAD" { print $NF }'); do
    if [ $((align)) -lt 65536 ]; then
      readelf -lW "$out" | grep LOAD >&2
      die "$out has a loadable segment aligned to $align, less than 64 KiB: it would not load on a 64 KiB page kernel"
    fi
  done
  ;;
esac

# It must run (the x86_64 one's start code must have applied the packed
# relocations: one that did not crashes on its first formatted line). The
# arm64 one runs here only through qemu-user (tests/qemu-user.sh puts one in
# the cache; this machine never registers it with binfmt_misc).
runner=()
if [ "$arch" = arm64 ] && [ "$(uname -m)" != aarch64 ]; then
  if qemu=$("$root/tests/qemu-user.sh" --cached 2>/dev/null); then
    runner=("$qemu")
  else
    echo "build-agent: not running the arm64 agent: no qemu-aarch64 in the cache (tests/qemu-user.sh fetches it)" >&2
    runner=(skip)
  fi
fi
if [ "${runner[0]:-}" != skip ] && ! "${runner[@]}" "$out" version >/dev/null; then
  die "$out does not run (\`${runner[*]} $out version\` failed)"
fi

size=$(stat -c %s "$out")
gz=$(gzip -9 -c "$out" | wc -c)
printf 'lab-agent (%s): %s\n' "$arch" "$out" >&2
kib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1024 }'; }
printf '  static, stripped: %d bytes (%s KiB)\n' "$size" "$(kib "$size")" >&2
printf '  gzip -9:          %d bytes (%s KiB)\n' "$gz" "$(kib "$gz")" >&2
printf '  base64 of gzip:   ~%d bytes (what the user-data carries)\n' "$(((gz + 2) / 3 * 4))" >&2
# The agent's size target: under 1,000,000 bytes, with every feature.
if [ "$size" -ge 1000000 ]; then
  die "$out is $size bytes, over the agent's budget (under 1,000,000 bytes) by $((size - 999999))" \
    "see BENCHMARKS.md's Size section for what each part costs and what was trimmed"
fi
echo "$out"
