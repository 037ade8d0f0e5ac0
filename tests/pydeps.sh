#!/usr/bin/env bash
# Puts the Python tools the tests run into the lab-agent cache, leaving the
# host as it was: no package installed, no service enabled, the system Python
# untouched, nothing written outside the cache. Instant when already done.
#
#   tests/pydeps.sh            ensure both, print nothing on stdout
#   tests/pydeps.sh --rebuild  fetch and build both even if they are cached
#
# - cloud-init: Debian's `cloud-init` package (the version the guest image
#   installs: both come from the host's apt sources) and every Debian Python
#   package it depends on, fetched with `apt-get download` and unpacked with
#   `dpkg-deb -x` (maintainer scripts never run). Debian's own interpreter runs
#   them:
#     PYTHONPATH=<dir>/root/usr/lib/python3/dist-packages /usr/bin/python3 \
#       -m cloudinit.cmd.main schema --config-file FILE
#   busybox is unpacked beside it (root/bin/busybox), for the installer's test.
# - venv: a virtualenv of Debian's python3 with the PyPI packages pinned
#   below (the validators; maturin and pytest for the Python package);
#   their commands are in <dir>/bin.
#
# Layout, under ${LAB_AGENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lab-agent}
# (the cache root of tests/vm/build-image.sh):
#   cloud-init/<hash>/   root/ (the unpacked packages), manifest.txt, .last-used
#   cloud-init/current   -> <hash> of the latest run (for people; tests ignore it)
#   venv/<hash>/         the virtualenv, manifest.txt, .last-used
#   venv/current         -> <hash> of the latest run
# <hash> is the first 16 hex digits of this script's sha256, so editing it (a
# pin, say) rebuilds both; the tests find <hash> the same way from their own
# checkout's copy (tests/src/pydeps.rs, agent/tests/agent/contract.rs), so two
# checkouts with different versions of this script each keep theirs. A <hash>
# no run has used for 14 days is removed.
#
# Needs the network on a cold run, and root only if the apt package lists are
# missing or stale (for one `apt-get update`). Logs go to stderr.
set -euo pipefail

# From PyPI, pinned: the validators (the tests drive their command lines),
# and the Python package's build and test tools (tests/tests/python.rs:
# maturin builds the wheel from python/, pytest runs python/tests).
pypi=(kubernetes-validate==1.37.0 schemathesis==4.32.5 maturin==1.16.0 pytest==9.2.0)
# Debian's interpreter: the one the guest runs cloud-init with, and the one
# the unpacked C extensions are built for (not whatever `python3` is on PATH).
python=/usr/bin/python3

log() { printf 'pydeps: %s\n' "$*" >&2; }
die() {
	printf 'pydeps: error: %s\n' "$1" >&2
	[ $# -lt 2 ] || printf 'hint: %s\n' "$2" >&2
	exit 1
}

rebuild=
case "${1:-}" in
"") ;;
--rebuild) rebuild=1 ;;
-h | --help)
	sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 0
	;;
*) die "unknown argument \`$1\`" "see \`$0 --help\`" ;;
esac

script=$(readlink -f "${BASH_SOURCE[0]}")
hash=$(sha256sum "$script" | cut -c1-16)
cache_root=${LAB_AGENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lab-agent}
ci_dir=$cache_root/cloud-init/$hash
venv_dir=$cache_root/venv/$hash
mkdir -p "$cache_root/cloud-init" "$cache_root/venv"

# Two checkouts or test runs may ask at once.
exec 9>"$cache_root/.pydeps.lock"
flock 9

# Points `<kind>/current` at <hash>, atomically.
point_current() {
	local kind_dir=$cache_root/$1
	[ "$(readlink "$kind_dir/current" 2>/dev/null)" = "$hash" ] && return 0
	ln -sfn "$hash" "$kind_dir/.current.tmp"
	mv -T "$kind_dir/.current.tmp" "$kind_dir/current"
}

# Removes what killed runs left in <kind>/, and what other versions of this
# script made there and no run has used for 14 days (another checkout may
# still be on an older or newer version: its tests use its own <hash>).
remove_stale() {
	local d
	touch "$cache_root/$1/$hash/.last-used"
	for d in "$cache_root/$1"/.tmp-* "$cache_root/$1"/*/; do
		d=${d%/}
		[ -e "$d" ] && [ ! -L "$d" ] && [ "$d" != "$cache_root/$1/$hash" ] || continue
		case ${d##*/} in
		.tmp-*) ;;
		*) [ -z "$(find "$d" -maxdepth 1 -name .last-used -mtime -14)" ] || continue ;;
		esac
		log "removing stale $d"
		rm -rf --one-file-system "$d"
	done
}

[ -x "$python" ] || die "$python is missing" "this needs Debian's python3 (apt-get install python3)"

# --- cloud-init, unpacked ------------------------------------------------------

apt_q=(-q -o APT::Sandbox::User=root) # root's cache dir is not the _apt user's
updated=
update_lists() {
	[ -z "$updated" ] || return 1
	[ "$(id -u)" = 0 ] || die "the apt package lists are missing or stale" "run \`apt-get update\` as root, then $0 again"
	log "apt-get update (the package lists are missing or stale)"
	updated=1
	apt-get -q -o DPkg::Lock::Timeout=600 update >&2 || die "apt-get update failed"
}

# cloud-init's Python dependencies, recursively: every python3-* package
# apt would install with it, bar the interpreter's own.
python_closure() {
	apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
		--no-breaks --no-replaces --no-enhances cloud-init |
		grep -E '^python3-' | grep -vxE 'python3-(minimal|distutils|lib2to3|venv|pip|dev)' | sort -u
}

tmp=
build_cloud_init() {
	apt-cache show cloud-init >/dev/null 2>&1 || update_lists
	local pkgs
	tmp=$(mktemp -d "$cache_root/cloud-init/.tmp-$hash-XXXXXX")
	trap 'rm -rf --one-file-system "$tmp"' EXIT
	mapfile -t pkgs < <(python_closure)
	[ ${#pkgs[@]} -gt 0 ] || die "apt-cache found no Python dependency of cloud-init"
	mkdir "$tmp/debs" "$tmp/root"
	log "downloading cloud-init and ${#pkgs[@]} Python packages (apt-get download, into $tmp)"
	# apt-get download writes into the current directory.
	# busybox too: the payload's installer must also run with busybox's sh,
	# base64 and gzip alone (as on Alpine), and the tests try it.
	(cd "$tmp/debs" && apt-get "${apt_q[@]}" -qq download cloud-init busybox "${pkgs[@]}" >&2) ||
		{ update_lists && (cd "$tmp/debs" && apt-get "${apt_q[@]}" -qq download cloud-init busybox "${pkgs[@]}" >&2); } ||
		die "apt-get download failed" "check the host's apt sources and network"
	local deb
	for deb in "$tmp"/debs/*.deb; do
		dpkg-deb -x "$deb" "$tmp/root"
	done
	local site=$tmp/root/usr/lib/python3/dist-packages
	# Compiled once here, so running the tests writes nothing into the cache.
	"$python" -m compileall -q -j0 "$site" >/dev/null ||
		log "warning: some modules did not byte-compile (they still import)"
	check_cloud_init "$site" "$tmp"
	{
		echo "script-hash: $hash"
		echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
		echo "cloud-init: $(dpkg-deb -f "$tmp"/debs/cloud-init_*.deb Version)"
		echo "python: $("$python" -c 'import sys; print(sys.version.split()[0])')"
		echo "packages:"
		for deb in "$tmp"/debs/*.deb; do
			printf '  %s %s %s\n' "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)" \
				"$(sha256sum "$deb" | cut -c1-64)"
		done
	} >"$tmp/manifest.txt"
	rm -rf "$tmp/debs"
	chmod 0755 "$tmp"
	rm -rf --one-file-system "$ci_dir"
	mv -T "$tmp" "$ci_dir"
	trap - EXIT
	log "cloud-init $(sed -n 's/^cloud-init: //p' "$ci_dir/manifest.txt") unpacked in $ci_dir"
}

# What the tests use must import and run from the unpacked tree alone.
check_cloud_init() {
	local site=$1 dir=$2
	PYTHONPATH=$site PYTHONDONTWRITEBYTECODE=1 "$python" -s -c '
import sys
from cloudinit import helpers, safeyaml, util
from cloudinit.user_data import UserDataProcessor
from cloudinit.config import cc_write_files
from cloudinit.handlers import boot_hook, cloud_config, jinja_template, shell_script
import cloudinit, jsonschema, yaml
for m in (cloudinit, jsonschema):
    if not m.__file__.startswith(sys.argv[1]):
        sys.exit("%s imports from %s, not from the unpacked tree" % (m.__name__, m.__file__))
' "$site" || die "cloud-init does not import from $site"
	printf '#cloud-config\nruncmd: ["echo ok"]\n' >"$dir/check.yaml"
	PYTHONPATH=$site PYTHONDONTWRITEBYTECODE=1 "$python" -s -m cloudinit.cmd.main \
		schema --config-file "$dir/check.yaml" >"$dir/check.out" 2>&1 &&
		grep -q '^Valid cloud-config' "$dir/check.out" ||
		die "\`cloud-init schema\` does not run from $site: $(cat "$dir/check.out")"
	rm -f "$dir/check.yaml" "$dir/check.out"
	"$dir/root/bin/busybox" sh -c 'echo ok | base64 | base64 -d' >/dev/null ||
		die "the unpacked busybox does not run"
}

# --- the PyPI validators, in a virtualenv --------------------------------------

build_venv() {
	"$python" -c 'import ensurepip, venv' 2>/dev/null ||
		die "$python cannot make a virtualenv" "apt-get install python3-venv (tests/install-deps.sh does)"
	# A virtualenv cannot be moved once made: build it in place, and write
	# its manifest (what marks it complete) last.
	rm -rf --one-file-system "$venv_dir"
	log "making a virtualenv with ${pypi[*]} in $venv_dir"
	"$python" -m venv "$venv_dir"
	# --no-cache-dir: pip's cache would be ~/.cache/pip, outside ours.
	PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
		"$venv_dir/bin/python" -m pip install -q --no-cache-dir "${pypi[@]}" >&2 ||
		die "pip install ${pypi[*]} failed" "check the network (pypi.org, or the index in your pip.conf)"
	local tool
	for tool in kubernetes-validate schemathesis maturin pytest; do
		"$venv_dir/bin/$tool" --version >/dev/null 2>&1 || die "\`$venv_dir/bin/$tool --version\` fails"
	done
	{
		echo "script-hash: $hash"
		echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
		echo "python: $("$venv_dir/bin/python" -c 'import sys; print(sys.version.split()[0])')"
		echo "packages:"
		"$venv_dir/bin/python" -m pip freeze --all 2>/dev/null | sed 's/^/  /'
	} >"$venv_dir/manifest.txt.tmp"
	mv "$venv_dir/manifest.txt.tmp" "$venv_dir/manifest.txt"
}

if [ -z "$rebuild" ] && [ -f "$ci_dir/manifest.txt" ]; then
	log "cached: $ci_dir"
else
	build_cloud_init
fi
point_current cloud-init
remove_stale cloud-init

if [ -z "$rebuild" ] && [ -f "$venv_dir/manifest.txt" ]; then
	log "cached: $venv_dir"
else
	build_venv
fi
point_current venv
remove_stale venv
