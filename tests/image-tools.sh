#!/usr/bin/env bash
# Puts Debian's skopeo, umoci and xorriso into the lab-agent cache, unpacked
# with their libraries, never installed, and prints the folder whose
# `bin/` holds wrappers that run them: the tests read `labctl agent-disk`'s
# artefacts with the tools an operator uses (`skopeo inspect` and `copy` of
# the containerDisk archive, `umoci unpack` of its image) and make a
# ConfigMap's disk the way KubeVirt does (`xorrisofs -volid … -joliet
# -rock`, kubevirt/kubevirt pkg/config/config.go).
#
#   tests/image-tools.sh            fetch them unless cached; print the folder
#   tests/image-tools.sh --cached   print the cached folder; exit 1 if none
#
# The packages are fetched with `apt-get download` and unpacked with
# `dpkg-deb -x` (no maintainer script runs, nothing lands in /etc or /usr).
#
# Layout, under ${LAB_AGENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lab-agent}:
#   image-tools/<hash of this script>/{root/,bin/skopeo,bin/umoci,bin/xorrisofs}
# Needs the network on a cold run (~11 MB download), and root only if the
# apt package lists are missing or stale (one `apt-get update`).
set -euo pipefail

log() { printf 'image-tools: %s\n' "$*" >&2; }
die() {
  printf 'image-tools: error: %s\n' "$1" >&2
  [ $# -lt 2 ] || printf 'hint: %s\n' "$2" >&2
  exit 1
}

# The tools and the libraries of theirs that a Debian 12 machine lacks.
packages=(skopeo umoci xorriso libisoburn1 libburn4 libisofs6 libjte2 libgpgme11 libassuan0)

cache_root=${LAB_AGENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lab-agent}
hash=$(sha256sum "$0" | cut -c1-16)
dir=$cache_root/image-tools/$hash

case "${1:-}" in
--cached)
  [ -x "$dir/bin/skopeo" ] || exit 1
  echo "$dir"
  exit 0
  ;;
"") ;;
-h | --help)
  sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 0
  ;;
*) die "unknown argument \`$1\`" "see \`$0 --help\`" ;;
esac

[ -x "$dir/bin/skopeo" ] && { echo "$dir"; exit 0; }

mkdir -p "$cache_root/image-tools"
exec 9>"$cache_root/image-tools/.lock"
flock 9
[ -x "$dir/bin/skopeo" ] && { echo "$dir"; exit 0; }
# Other versions of this script's unpacked tools are of no use any more.
find "$cache_root/image-tools" -mindepth 1 -maxdepth 1 -type d ! -name "$hash" -exec rm -rf {} +

work=$(mktemp -d "$cache_root/image-tools/.fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
chmod 0777 "$work" # apt-get download writes as the _apt user where it can
download() { (cd "$work" && apt-get -q -q download "${packages[@]}" >&2); }
if ! download; then
  log "refreshing the apt package lists"
  apt-get -q update >&2 || die "cannot refresh the apt package lists" "run \`apt-get update\` as root, then retry"
  download || die "cannot download ${packages[*]}" "is the network up and Debian's main archive in the apt sources?"
fi
for deb in "$work"/*.deb; do
  dpkg-deb -x "$deb" "$work/root"
done
mkdir -p "$work/bin"
lib='$here/../root/usr/lib/x86_64-linux-gnu'
for tool in skopeo umoci xorrisofs; do
  cat >"$work/bin/$tool" <<WRAP
#!/bin/sh
here=\$(dirname "\$(readlink -f "\$0")")
LD_LIBRARY_PATH=$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} exec "\$here/../root/usr/bin/$tool" "\$@"
WRAP
  chmod 0755 "$work/bin/$tool"
done
"$work/bin/skopeo" --version >/dev/null || die "the unpacked skopeo does not run"
"$work/bin/umoci" --version >/dev/null || die "the unpacked umoci does not run"
"$work/bin/xorrisofs" -version >/dev/null 2>&1 || die "the unpacked xorrisofs does not run"
mkdir -p "$dir"
mv "$work/root" "$work/bin" "$dir/"
log "skopeo, umoci, xorrisofs in $dir"
echo "$dir"
