#!/usr/bin/env bash
# Builds a minimal Debian guest that the VM tests boot, and installs the host
# packages needed to build and boot it.
#
#   tests/vm/build-image.sh [--guest NAME]              ensure host packages + image, print the image dir
#   tests/vm/build-image.sh --host-deps                 only ensure the host packages
#   tests/vm/build-image.sh [--guest NAME] --rebuild    build the image even if it is cached
#
# Guests (NAME): `debian-12` (bookworm: cloud-init 22.4, systemd 252, the
# default) and `debian-13` (trixie: cloud-init 25.1 single-process,
# systemd 257, cgroup v2 only).
#
# The image dir holds `vmlinuz`, `initrd.img` and `rootfs.raw` (a sparse ext4
# image, booted with `root=/dev/vda`, never written to: each VM gets its own
# qcow2 overlay), and `disk.raw`: the same tree as a bootable disk, as cloud
# images are (an MBR partition table, GRUB in the gap before the first
# partition, the root file system in partition 1), for `labctl try --vm`. It
# lives outside the repo, in
#   ${LAB_AGENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lab-agent}/vm/<guest>-<hash of this script>/
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
guest=debian-12
while [ $# -gt 0 ]; do
	case "$1" in
	--host-deps) mode=deps ;;
	--rebuild) mode=rebuild ;;
	--guest)
		[ $# -ge 2 ] || die "\`--guest\` needs a name" "one of \`debian-12\`, \`debian-13\`"
		guest=$2
		shift
		;;
	--guest=*) guest=${1#--guest=} ;;
	-h | --help)
		sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
		exit 0
		;;
	*) die "unknown argument \`$1\`" "see \`$0 --help\`" ;;
	esac
	shift
done
case "$guest" in
debian-12) guest_suite=bookworm ;;
debian-13) guest_suite=trixie ;;
*) die "unknown guest \`$guest\`" "one of \`debian-12\`, \`debian-13\`" ;;
esac

script=$(readlink -f "${BASH_SOURCE[0]}")
hash=$(sha256sum "$script" | cut -c1-16)
cache_root=${LAB_AGENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lab-agent}
vm_cache=$cache_root/vm
out=$vm_cache/$guest-$hash
mkdir -p "$vm_cache"

# Serialise builders (two test binaries may ask at once) and host installs.
exec 9>"$vm_cache/.build.lock"
flock 9

. /etc/os-release
codename=${VERSION_CODENAME:?/etc/os-release has no VERSION_CODENAME}
[ "$codename" = bookworm ] || log "warning: host is $codename, this script was written for a bookworm host"
# grub-pc-bin: GRUB's BIOS modules and grub-mkimage for disk.raw's boot
# loader; it installs nothing to a disk by itself (grub-pc would).
# e2fsprogs and openssh-client, as every cloud image has them: without
# them cloud-init's resizefs and ssh (host keys) modules fail on every
# first boot (trixie's minbase has neither), and on Debian 13 that makes
# every boot "degraded" before the payload does anything.
guest_packages=(
	linux-image-cloud-amd64 initramfs-tools systemd-sysv udev dbus cloud-init
	sudo bash iproute2 procps less locales grub-pc-bin e2fsprogs openssh-client
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

# Leftovers of killed builds, images of this guest from older versions of
# this script, and images of the layout before guest names (a bare hash).
for d in "$vm_cache"/.tmp-"$guest"-* "$vm_cache"/"$guest"-*/ "$vm_cache"/????????????????/; do
	d=${d%/}
	[ -e "$d" ] && [ "$d" != "$out" ] || continue
	log "removing stale $d"
	rm -rf --one-file-system "$d"
done

tmp=$(mktemp -d "$vm_cache/.tmp-$guest-$hash-XXXXXX")
trap 'rm -rf --one-file-system "$tmp"' EXIT
tree=$tmp/tree
mkdir "$tree"
# The host's own repositories of its release, with the guest's suite in
# place of the host's: the same mirror, no address written here.
sources_list "^$codename(-updates|-security)?\$" |
	awk -v c="$codename" -v g="$guest_suite" '{ sub("^" c, g, $(NF-1)); print }' >"$tmp/guest-sources.list"
[ -s "$tmp/guest-sources.list" ] || die "found no \`$codename\` repository in the host's apt sources to derive \`$guest_suite\` from"

started=$(date +%s)
log "building $guest ($guest_suite) guest in $tmp (mmdebstrap, minbase)"

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

# By label: the same tree boots as /dev/vda (kernel + rootfs.raw) and as
# /dev/vda1 (disk.raw).
echo "LABEL=rootfs / ext4 rw,errors=remount-ro 0 0" >"$1/etc/fstab"
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
	echo "guest: $guest ($guest_suite)"
	echo "cloud-init: $(chroot "$tree" dpkg-query -W -f '${Version}' cloud-init)"
	echo "systemd: $(chroot "$tree" dpkg-query -W -f '${Version}' systemd)"
	echo "packages: $(chroot "$tree" dpkg-query -W -f '.\n' | wc -l)"
	echo "tree-size: $(du -sh --one-file-system "$tree" | cut -f1)"
} >"$tmp/manifest.txt"

log "making ext4 rootfs.raw (3 GiB sparse)"
truncate -s 3G "$tmp/rootfs.raw"
mkfs.ext4 -q -F -L rootfs -m 0 -d "$tree" "$tmp/rootfs.raw" >&2
# disk.raw: the tree again as a BIOS-bootable disk, as a cloud image is
# laid out: MBR with one partition from 1 MiB (the root file system), GRUB's
# boot sector in the MBR and its core image in the gap before the partition.
# No loop device, mount or host GRUB: the guest's own grub-mkimage makes the
# core image (with the modules to read the partition and boot Linux, and
# the prefix pointing at it), grub-mkimage fills the core image's block
# list for a core placed at sector 1, which boot.img's default expects.
log "making disk.raw (MBR, GRUB, ext4 root in partition 1)"
mkdir -p "$tree/boot/grub"
cat >"$tree/boot/grub/grub.cfg" <<EOT
set timeout=0
set default=0
menuentry "Debian ($guest_suite)" {
	linux /boot/vmlinuz-$kver root=/dev/vda1 ro console=ttyS0
	initrd /boot/initrd.img-$kver
}
EOT
chroot "$tree" grub-mkimage -O i386-pc -o /boot/grub/core.img -p '(hd0,msdos1)/boot/grub' \
	biosdisk part_msdos ext2 linux normal configfile echo test
core_bytes=$(stat -c %s "$tree/boot/grub/core.img")
[ "$core_bytes" -lt $((2047 * 512)) ] || die "GRUB's core image ($core_bytes bytes) does not fit before the partition"
cp "$tree/boot/grub/core.img" "$tmp/core.img"
cp "$tree/usr/lib/grub/i386-pc/boot.img" "$tmp/boot.img"
rm "$tree/boot/grub/core.img"
disk_sectors=$((3 * 1024 * 1024 * 2))
part_start=2048
part_sectors=$((disk_sectors - part_start))
truncate -s $((disk_sectors * 512)) "$tmp/disk.raw"
mkfs.ext4 -q -F -L rootfs -m 0 -E offset=$((part_start * 512)) -d "$tree" \
	"$tmp/disk.raw" $((part_sectors / 2))k >&2
le32() { printf '\\x%02x' $(($1 & 255)) $(($1 >> 8 & 255)) $(($1 >> 16 & 255)) $(($1 >> 24 & 255)); }
{
	# boot.img's code (440 bytes), then the partition table: one active
	# Linux partition, CHS fields saturated (LBA is what counts), and the
	# boot signature.
	head -c 440 "$tmp/boot.img"
	printf '\0\0\0\0\0\0'
	printf '\x80\xfe\xff\xff\x83\xfe\xff\xff'
	printf "$(le32 $part_start)$(le32 $part_sectors)"
	head -c 48 /dev/zero
	printf '\x55\xaa'
} | dd of="$tmp/disk.raw" conv=notrunc status=none
dd if="$tmp/core.img" of="$tmp/disk.raw" bs=512 seek=1 conv=notrunc status=none
rm "$tmp/core.img" "$tmp/boot.img"

rm -rf --one-file-system "$tree" "$tmp/initrd.list" "$tmp/guest-sources.list"
chmod 0444 "$tmp/rootfs.raw" "$tmp/disk.raw" "$tmp/vmlinuz" "$tmp/initrd.img"
chmod 0755 "$tmp"

rm -rf --one-file-system "$out"
mv -T "$tmp" "$out"
trap - EXIT
log "built $out in $(($(date +%s) - started)) s ($(du -h "$out/rootfs.raw" | cut -f1) allocated)"
printf '%s\n' "$out"
