#!/usr/bin/env bash
# Builds the minimal Debian 12 guest that the VM tests boot, and installs the
# host packages needed to build and boot it.
#
#   tests/vm/build-image.sh              ensure host packages + image, print the image dir
#   tests/vm/build-image.sh --host-deps  only ensure the host packages
#   tests/vm/build-image.sh --rebuild    build the image even if it is cached
#
# The image dir holds `vmlinuz`, `initrd.img` and `rootfs.raw` (a sparse ext4
# image, booted with `root=/dev/vda`, never written to: each VM gets its own
# qcow2 overlay). It lives outside the repo, in
#   ${LAB_AGENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lab-agent}/vm/<hash of this script>/
# so editing this script rebuilds it. The build happens in a temporary dir that
# is renamed into place at the end: a killed build never leaves a half image.
#
# Everything comes from the host's own apt sources (no mirror is hard-coded);
# nothing is downloaded from anywhere else. The guest is deliberately neutral:
# plain Debian + cloud-init, root only, nothing of lab-agent baked in.
#
# Logs go to stderr; stdout carries only the image dir. Needs root.
set -euo pipefail

log() { printf 'build-image: %s\n' "$*" >&2; }
die() {
	printf 'build-image: error: %s\n' "$1" >&2
	[ $# -lt 2 ] || printf 'hint: %s\n' "$2" >&2
	exit 1
}

mode=image
case "${1:-}" in
"") ;;
--host-deps) mode=deps ;;
--rebuild) mode=rebuild ;;
-h | --help)
	sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 0
	;;
*) die "unknown argument \`$1\`" "see \`$0 --help\`" ;;
esac

script=$(readlink -f "${BASH_SOURCE[0]}")
hash=$(sha256sum "$script" | cut -c1-16)
cache_root=${LAB_AGENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lab-agent}
vm_cache=$cache_root/vm
out=$vm_cache/$hash
mkdir -p "$vm_cache"

# Serialise builders (two test binaries may ask at once) and host installs.
exec 9>"$vm_cache/.build.lock"
flock 9

. /etc/os-release
codename=${VERSION_CODENAME:?/etc/os-release has no VERSION_CODENAME}
[ "$codename" = bookworm ] || log "warning: host is $codename, this script was written for a bookworm host"
guest_suite=bookworm
guest_packages=(
	linux-image-cloud-amd64 initramfs-tools systemd-sysv udev dbus cloud-init
	sudo bash iproute2 procps less locales
)

# --- host packages ----------------------------------------------------------

need_root() {
	[ "$(id -u)" = 0 ] || die "must run as root to $1" "run \`$script\` once as root"
}

apt_get() { apt-get -q -y -o DPkg::Lock::Timeout=600 "$@"; }

# The host's Debian repositories, one "URI SUITE COMPONENT" per line, read
# from its own apt configuration (deb822 or one-line, whatever it uses).
host_repos() {
	apt-get indextargets --no-release-info \
		--format '$(REPO_URI) $(RELEASE) $(COMPONENT) $(IDENTIFIER)' |
		awk -v c="$codename" '$4 == "Packages" && ($2 == c || index($2, c "-") == 1) { print $1, $2, $3 }' |
		sort -u
}

# Writes a one-line sources list for the host's Debian repos of `suite_re`
# (an awk regex on the suite), with the archive keyring when there is one.
sources_list() {
	local opts=""
	[ -e /usr/share/keyrings/debian-archive-keyring.gpg ] &&
		opts="[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
	host_repos | awk -v o="$opts" -v re="$1" '$2 ~ re { print "deb " o $1 " " $2 " " $3 }'
}

ensure_host_packages() {
	local missing=() cmd pkg
	for pair in mmdebstrap:mmdebstrap cloud-localds:cloud-image-utils genisoimage:genisoimage \
		mkfs.ext4:e2fsprogs flock:util-linux; do
		cmd=${pair%%:*} pkg=${pair#*:}
		command -v "$cmd" >/dev/null || missing+=("$pkg")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		need_root "install ${missing[*]}"
		log "installing host packages: ${missing[*]}"
		apt_get update >&2 || true # lists may be stale or absent on a new machine
		DEBIAN_FRONTEND=noninteractive apt_get install --no-install-recommends "${missing[@]}" >&2
	fi

	local qmissing=()
	command -v qemu-system-x86_64 >/dev/null || qmissing+=(qemu-system-x86)
	command -v qemu-img >/dev/null || qmissing+=(qemu-utils)
	[ ${#qmissing[@]} -eq 0 ] && return 0
	need_root "install ${qmissing[*]}"

	# bookworm's qemu-system-x86 (7.2) conflicts with a qemu-utils from
	# bookworm-backports (these machines ship 10.0): take qemu from backports,
	# on the host's own mirror, through a private sources list and lists dir so
	# the host's apt configuration is left as it was.
	local priv=$cache_root/apt-backports
	mkdir -p "$priv/lists/partial" "$priv/sources.list.d"
	local bp
	bp=$(sources_list "^$codename\$" | awk -v c="$codename" '{ $(NF-1) = c "-backports"; print }')
	[ -n "$bp" ] || die "found no \`$codename\` repository in the host's apt sources to derive $codename-backports from"
	{
		sources_list "^$codename"
		printf '%s\n' "$bp"
	} | sort -u >"$priv/sources.list.d/host-and-backports.list"
	local papt=(
		-o "Dir::Etc::SourceList=$priv/sources.list.d/host-and-backports.list"
		-o "Dir::Etc::SourceParts=$priv/empty.d"
		-o "Dir::State::Lists=$priv/lists"
		-o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache="
	)
	mkdir -p "$priv/empty.d"
	log "installing ${qmissing[*]} from $codename-backports ($(sed -n 's/^deb \(\[[^]]*\] \)\{0,1\}\([^ ]*\).*backports.*/\2/p' "$priv/sources.list.d/host-and-backports.list"))"
	apt_get "${papt[@]}" update >&2
	DEBIAN_FRONTEND=noninteractive apt_get "${papt[@]}" install --no-install-recommends \
		-t "$codename-backports" "${qmissing[@]}" >&2
	command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 is still missing after the install"
}

ensure_host_packages
[ "$mode" = deps ] && exit 0

# --- the image ----------------------------------------------------------------

if [ "$mode" != rebuild ] && [ -f "$out/rootfs.raw" ]; then
	log "cached: $out"
	printf '%s\n' "$out"
	exit 0
fi

need_root "build the guest image (mmdebstrap, chroot)"

# Leftovers of killed builds, and images of older versions of this script.
for d in "$vm_cache"/.tmp-* "$vm_cache"/*/; do
	d=${d%/}
	[ -e "$d" ] && [ "$d" != "$out" ] || continue
	log "removing stale $d"
	rm -rf --one-file-system "$d"
done

tmp=$(mktemp -d "$vm_cache/.tmp-$hash-XXXXXX")
trap 'rm -rf --one-file-system "$tmp"' EXIT
tree=$tmp/tree
mkdir "$tree"
sources_list "^$guest_suite(-updates|-security)?\$" >"$tmp/guest-sources.list"
[ -s "$tmp/guest-sources.list" ] || die "found no \`$guest_suite\` repository in the host's apt sources"

started=$(date +%s)
log "building $guest_suite guest in $tmp (mmdebstrap, minbase)"

# initramfs: only the listed modules (a small initrd built once, when the
# kernel package installs), and the cloud kernel has virtio as modules.
setup_hook='
set -e
mkdir -p "$1/etc/initramfs-tools/conf.d" "$1/usr/share/initramfs-tools/modules.d"
echo MODULES=list >"$1/etc/initramfs-tools/conf.d/lab-agent-vm"
printf "%s\n" virtio_pci virtio_blk virtio_net virtio_console >"$1/usr/share/initramfs-tools/modules.d/lab-agent-vm"
'

customize_hook='
set -e
# cloud-init locale module fails (and the boot ends with errors) without it.
echo "en_US.UTF-8 UTF-8" >"$1/etc/locale.gen"
chroot "$1" locale-gen >&2
echo "LANG=en_US.UTF-8" >"$1/etc/default/locale"

# Seed only from NoCloud: never probe cloud metadata servers.
cat >"$1/etc/cloud/cloud.cfg.d/05_lab_agent_vm_datasource.cfg" <<EOT
# Local VM tests: the seed is a NoCloud disk (volume id cidata).
datasource_list: [ NoCloud, None ]
EOT

# cloud-init renders the network config for systemd-networkd (no ifupdown,
# no netplan here); networkd must then be enabled to apply it (DHCP on the
# virtio NIC), as in a cloud image that uses networkd.
chroot "$1" systemctl enable systemd-networkd.service >&2

# Keep the emulated CPU for the test.
chroot "$1" systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer >&2

echo "/dev/vda / ext4 rw,errors=remount-ro 0 0" >"$1/etc/fstab"
echo localhost >"$1/etc/hostname"
printf "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" >"$1/etc/hosts"
rm -f "$1/etc/resolv.conf"
'

mmdebstrap --variant=minbase --mode=root \
	--include="$(
		IFS=,
		echo "${guest_packages[*]}"
	)" \
	--setup-hook="$setup_hook" \
	--customize-hook="$customize_hook" \
	"$guest_suite" "$tree" "$tmp/guest-sources.list" >&2

kernel=$(find "$tree/boot" -maxdepth 1 -name 'vmlinuz-*' | sort -V | tail -n1)
initrd=$(find "$tree/boot" -maxdepth 1 -name 'initrd.img-*' | sort -V | tail -n1)
[ -n "$kernel" ] && [ -n "$initrd" ] || die "the guest has no kernel or initrd in /boot"
kver=${kernel##*/vmlinuz-}
# The root disk's drivers must be in the initrd or built in.
chroot "$tree" lsinitramfs "/boot/initrd.img-$kver" >"$tmp/initrd.list"
for m in virtio_pci virtio_blk; do
	grep -q "/$m\.ko" "$tmp/initrd.list" ||
		grep -q "/$m\.ko" "$tree/lib/modules/$kver/modules.builtin" ||
		{ grep virtio "$tmp/initrd.list" >&2 || true; die "initrd lacks $m: the guest could not find its root disk"; }
done
cp "$kernel" "$tmp/vmlinuz"
cp "$initrd" "$tmp/initrd.img"

{
	echo "script-hash: $hash"
	echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "kernel: $kver"
	echo "cloud-init: $(chroot "$tree" dpkg-query -W -f '${Version}' cloud-init)"
	echo "packages: $(chroot "$tree" dpkg-query -W -f '.\n' | wc -l)"
	echo "tree-size: $(du -sh --one-file-system "$tree" | cut -f1)"
} >"$tmp/manifest.txt"

log "making ext4 rootfs.raw (3 GiB sparse)"
truncate -s 3G "$tmp/rootfs.raw"
mkfs.ext4 -q -F -L rootfs -m 0 -d "$tree" "$tmp/rootfs.raw" >&2
rm -rf --one-file-system "$tree" "$tmp/initrd.list" "$tmp/guest-sources.list"
chmod 0444 "$tmp/rootfs.raw" "$tmp/vmlinuz" "$tmp/initrd.img"
chmod 0755 "$tmp"

rm -rf --one-file-system "$out"
mv -T "$tmp" "$out"
trap - EXIT
log "built $out in $(($(date +%s) - started)) s ($(du -h "$out/rootfs.raw" | cut -f1) allocated)"
printf '%s\n' "$out"
