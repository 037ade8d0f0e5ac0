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
# systemd 257, cgroup v2 only), both amd64; `debian-13-arm64`, the same
# trixie for arm64 (booted on the `virt` machine under TCG).
#
# A guest of another architecture than the host's is built without
# changing the host: its packages' maintainer scripts run under Debian's
# user-mode qemu (`tests/qemu-user.sh`, unpacked into the cache), through a
# binfmt_misc handler registered in a binfmt_misc instance of a user
# namespace of the build's own (Linux >= 6.7), never in the host's.
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
in_ns=""
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
	--in-binfmt-ns) in_ns=1 ;; # internal: see in_binfmt_ns
	-h | --help)
		sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
		exit 0
		;;
	*) die "unknown argument \`$1\`" "see \`$0 --help\`" ;;
	esac
	shift
done
case "$guest" in
debian-12) guest_suite=bookworm guest_arch=amd64 ;;
debian-13) guest_suite=trixie guest_arch=amd64 ;;
debian-13-arm64) guest_suite=trixie guest_arch=arm64 ;;
*) die "unknown guest \`$guest\`" "one of \`debian-12\`, \`debian-13\`, \`debian-13-arm64\`" ;;
esac
host_arch=$(dpkg --print-architecture)

script=$(readlink -f "${BASH_SOURCE[0]}")
hash=$(sha256sum "$script" | cut -c1-16)
cache_root=${LAB_AGENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lab-agent}
vm_cache=$cache_root/vm
out=$vm_cache/$guest-$hash
mkdir -p "$vm_cache"


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
	"linux-image-cloud-$guest_arch" initramfs-tools systemd-sysv udev dbus cloud-init
	sudo bash iproute2 procps less locales e2fsprogs openssh-client
)
# The boot loader disk.raw carries: GRUB for the BIOS on amd64, for UEFI
# on arm64 (the `virt` machine has no BIOS).
case "$guest_arch" in
amd64) guest_packages+=(grub-pc-bin) ;;
arm64) guest_packages+=(grub-efi-arm64-bin) ;;
esac

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
	local tools=(mmdebstrap:mmdebstrap cloud-localds:cloud-image-utils genisoimage:genisoimage
		mkfs.ext4:e2fsprogs flock:util-linux)
	# arm64's disk.raw has an EFI system partition (FAT), made from files.
	[ "$guest_arch" = amd64 ] || tools+=(mkfs.vfat:dosfstools mcopy:mtools)
	for pair in "${tools[@]}"; do
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
	if [ "$guest_arch" = arm64 ]; then
		command -v qemu-system-aarch64 >/dev/null || qmissing+=(qemu-system-arm)
		[ -f /usr/share/qemu-efi-aarch64/QEMU_EFI.fd ] || qmissing+=(qemu-efi-aarch64)
	fi
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

# Runs this script again, with the same arguments, as root of a new user
# namespace (uids and gids 0-65535 mapped to the same host ids, so the
# tree's owners are real) with its own mount and PID namespaces, where a
# binfmt_misc instance of its own runs the guest's binaries under
# qemu-user (the F flag: the kernel opens qemu when the handler is
# registered, so the chroot needs no copy of it). When the build ends, the
# namespace, its mounts and the handler are gone.
in_binfmt_ns() {
	local qemu_user=$1 fifo pid
	shift
	case "$qemu_user" in *:*) die "the qemu-user path \`$qemu_user\` has a colon, which binfmt_misc cannot take" "set LAB_AGENT_CACHE to a path without one" ;; esac
	fifo=$(mktemp -u "$vm_cache/.ns-fifo-XXXXXX")
	mkfifo "$fifo"
	# The child waits until its parent (this shell, root of the host's
	# namespace) has written its id maps, then enters the mount and PID
	# namespaces, with a /proc of its own.
	unshare --user bash -c 'read -r _ <"$0"; rm -f "$0"; exec unshare --mount --propagation private --pid --fork --mount-proc "$@"' \
		"$fifo" env LAB_AGENT_QEMU_USER="$qemu_user" "$@" &
	pid=$!
	while [ "$(readlink "/proc/$pid/ns/user")" = "$(readlink /proc/self/ns/user)" ]; do
		kill -0 "$pid" 2>/dev/null || { rm -f "$fifo"; die "cannot make a user namespace (unshare --user)"; }
		sleep 0.01
	done
	echo "0 0 65536" >"/proc/$pid/uid_map"
	echo "0 0 65536" >"/proc/$pid/gid_map"
	echo go >"$fifo"
	wait "$pid"
}

# In the namespace: the binfmt_misc instance and the aarch64 handler (the
# magic and mask of an ELF64 little-endian aarch64 executable, as
# Debian's qemu-user-static registers it).
register_binfmt() {
	mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc ||
		die "cannot mount a binfmt_misc instance in a user namespace" "needs Linux >= 6.7"
	printf '%s\n' ':qemu-aarch64:M::\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:'"$LAB_AGENT_QEMU_USER"':F' \
		>/proc/sys/fs/binfmt_misc/register
}

# Serialise host installs, then builders of this guest (two test binaries
# may ask at once); the builds of different guests run side by side. (The
# namespace's own run is under its parent's locks.)
if [ -z "$in_ns" ]; then
	exec 9>"$vm_cache/.build.lock"
	flock 9
	ensure_host_packages
	[ "$mode" = deps ] && exit 0
	exec 9>&-
	exec 8>"$vm_cache/.build-$guest.lock"
	flock 8
fi

# --- the image ----------------------------------------------------------------

if [ "$mode" != rebuild ] && [ -f "$out/rootfs.raw" ]; then
	log "cached: $out"
	printf '%s\n' "$out"
	exit 0
fi

need_root "build the guest image (mmdebstrap, chroot)"

if [ "$guest_arch" != "$host_arch" ]; then
	[ "$guest_arch" = arm64 ] || die "cannot build a $guest_arch guest on this $host_arch host"
	if [ -z "$in_ns" ]; then
		qemu_user=$(bash "$(dirname "$script")/../qemu-user.sh")
		log "building an $guest_arch guest on $host_arch: its binaries run under $qemu_user, in a user namespace"
		args=(--guest "$guest")
		[ "$mode" = rebuild ] && args+=(--rebuild)
		in_binfmt_ns "$qemu_user" bash "$script" "${args[@]}" --in-binfmt-ns
		exit $?
	fi
	register_binfmt
	foreign_opts=(--arch="$guest_arch" --skip=check/qemu)
else
	foreign_opts=()
fi

# Leftovers of killed builds, images of this guest from older versions of
# this script, and images of the layout before guest names (a bare hash).
# (`?` × 16: the hash, so that debian-13's never takes debian-13-arm64's.)
for d in "$vm_cache"/.tmp-"$guest"-????????????????-* "$vm_cache"/"$guest"-????????????????/ "$vm_cache"/????????????????/; do
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

mmdebstrap --variant=minbase --mode=root "${foreign_opts[@]}" \
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
# disk.raw: the tree again as a bootable disk, as a cloud image is laid
# out, with an MBR partition table. No loop device, mount or host GRUB: the
# guest's own grub-mkimage makes the boot loader, the file systems are made
# from folders (`mkfs.ext4 -d` at an offset, `mcopy` into a FAT image), the
# partition table is written by printf.
# - amd64 (BIOS): GRUB's boot.img in the MBR, its core image in the gap
#   before the root partition (grub-mkimage fills the core image's block
#   list for a core placed at sector 1, which boot.img's default expects).
# - arm64 (UEFI, the `virt` machine's firmware): an EFI system partition
#   (FAT, MBR type 0xef) with GRUB at the removable-media path
#   `\EFI\BOOT\BOOTAA64.EFI`, which firmware without boot entries runs.
le32() { printf '\\x%02x' $(($1 & 255)) $(($1 >> 8 & 255)) $(($1 >> 16 & 255)) $(($1 >> 24 & 255)); }
# One MBR partition entry: active flag, type, first sector, sectors (CHS
# fields saturated: LBA is what counts).
mbr_entry() { printf "\\x$1\\xfe\\xff\\xff\\x$2\\xfe\\xff\\xff$(le32 "$3")$(le32 "$4")"; }
disk_sectors=$((3 * 1024 * 1024 * 2))
mkdir -p "$tree/boot/grub"
case "$guest_arch" in
amd64)
	log "making disk.raw (MBR, GRUB for the BIOS, ext4 root in partition 1)"
	root_part=1 console=ttyS0
	grub_format=i386-pc grub_modules="biosdisk part_msdos ext2 linux normal configfile echo test"
	part_start=2048
	;;
arm64)
	log "making disk.raw (MBR, an EFI system partition with GRUB, ext4 root in partition 2)"
	root_part=2 console=ttyAMA0
	grub_format=arm64-efi grub_modules="part_msdos ext2 linux normal configfile echo test"
	esp_start=2048 esp_sectors=$((32 * 1024 * 2))
	part_start=$((esp_start + esp_sectors))
	;;
esac
part_sectors=$((disk_sectors - part_start))
cat >"$tree/boot/grub/grub.cfg" <<EOT
set timeout=0
set default=0
menuentry "Debian ($guest_suite)" {
	linux /boot/vmlinuz-$kver root=/dev/vda$root_part ro console=$console
	initrd /boot/initrd.img-$kver
}
EOT
chroot "$tree" grub-mkimage -O "$grub_format" -o /boot/grub/core.img \
	-p "(hd0,msdos$root_part)/boot/grub" $grub_modules
cp "$tree/boot/grub/core.img" "$tmp/core.img"
rm "$tree/boot/grub/core.img"
[ "$guest_arch" = amd64 ] && cp "$tree/usr/lib/grub/i386-pc/boot.img" "$tmp/boot.img"
truncate -s $((disk_sectors * 512)) "$tmp/disk.raw"
mkfs.ext4 -q -F -L rootfs -m 0 -E offset=$((part_start * 512)) -d "$tree" \
	"$tmp/disk.raw" $((part_sectors / 2))k >&2
case "$guest_arch" in
amd64)
	core_bytes=$(stat -c %s "$tmp/core.img")
	[ "$core_bytes" -lt $((2047 * 512)) ] || die "GRUB's core image ($core_bytes bytes) does not fit before the partition"
	{
		# boot.img's code (440 bytes), then the partition table: one
		# active Linux partition, and the boot signature.
		head -c 440 "$tmp/boot.img"
		printf '\0\0\0\0\0\0'
		mbr_entry 80 83 "$part_start" "$part_sectors"
		head -c 48 /dev/zero
		printf '\x55\xaa'
	} | dd of="$tmp/disk.raw" conv=notrunc status=none
	dd if="$tmp/core.img" of="$tmp/disk.raw" bs=512 seek=1 conv=notrunc status=none
	rm "$tmp/boot.img"
	;;
arm64)
	mkfs.vfat -n EFI -C "$tmp/esp.img" $((esp_sectors / 2)) >&2
	MTOOLS_SKIP_CHECK=1 mmd -i "$tmp/esp.img" ::/EFI ::/EFI/BOOT
	MTOOLS_SKIP_CHECK=1 mcopy -i "$tmp/esp.img" "$tmp/core.img" ::/EFI/BOOT/BOOTAA64.EFI
	dd if="$tmp/esp.img" of="$tmp/disk.raw" bs=512 seek="$esp_start" conv=notrunc status=none
	{
		head -c 446 /dev/zero
		mbr_entry 00 ef "$esp_start" "$esp_sectors"
		mbr_entry 00 83 "$part_start" "$part_sectors"
		head -c 32 /dev/zero
		printf '\x55\xaa'
	} | dd of="$tmp/disk.raw" conv=notrunc status=none
	rm "$tmp/esp.img"
	;;
esac
rm "$tmp/core.img"

rm -rf --one-file-system "$tree" "$tmp/initrd.list" "$tmp/guest-sources.list"
chmod 0444 "$tmp/rootfs.raw" "$tmp/disk.raw" "$tmp/vmlinuz" "$tmp/initrd.img"
chmod 0755 "$tmp"

rm -rf --one-file-system "$out"
mv -T "$tmp" "$out"
trap - EXIT
log "built $out in $(($(date +%s) - started)) s ($(du -h "$out/rootfs.raw" | cut -f1) allocated)"
printf '%s\n' "$out"
