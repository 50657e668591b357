# shellcheck shell=bash
# Shared settings and helpers for the e2e scripts. Source it; do not run it.
# Every version the offline cluster is built from lives here, so a cache key
# changes whenever one of them does.

set -euo pipefail
shopt -s inherit_errexit

E2E_HACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
E2E_DIR=$(dirname "$E2E_HACK")
REPO_ROOT=$(dirname "$E2E_DIR")
TOOLS_DIR="$E2E_DIR/tools"
# kube-router is built from a module of its own, whose go.mod pins it.
KUBE_ROUTER_DIR="$TOOLS_DIR/kube-router"

SANDBOX_E2E_CACHE=${SANDBOX_E2E_CACHE:-/var/cache/sandbox-e2e}
export SANDBOX_E2E_CACHE

KIND_VERSION=v0.33.0
K8S_VERSION=v1.37.0
ETCD_VERSION=v3.7.0
COREDNS_VERSION=v1.14.6
CONTAINERD_VERSION=v2.4.2
RUNC_VERSION=v1.5.3
CRICTL_VERSION=v1.37.0
CNI_PLUGINS_VERSION=v1.10.0
KUBE_ROUTER_VERSION=$(sed -n 's|^\tgithub.com/cloudnativelabs/kube-router/v2 \(v[^ ]*\).*|\1|p' "$KUBE_ROUTER_DIR/go.mod")
DEBIAN_SUITE=bookworm

# The CPU request of the control plane's pods (kubeadm gives them 100m to
# 250m), which is also their CPU weight under load. A production cluster runs
# its control plane apart from the nodes that run sandboxes; on the one kind
# node it weighs no more than a sandbox pod (kindenv.PodCPURequest, which its
# tests hold at least this), so that it does not outweigh a snippet 25 to 1.
CONTROL_PLANE_CPU_REQUEST=10m

# Docker image names we own. The node image tag carries a hash of everything
# that goes into it (see node-image.sh).
NODE_IMAGE_REPO=sandbox-e2e/kind-node
SANDBOX_IMAGE=${SANDBOX_IMAGE:-sandbox:dev}

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
[ -n "$KUBE_ROUTER_VERSION" ] || die "no kube-router version in $KUBE_ROUTER_DIR/go.mod"

# step NAME CMD...: runs CMD, printing the step's name when it starts and how
# long it took when it ends. CMD runs in a subshell with errexit, so a failing
# command inside a function fails the step; variables it sets do not outlive it.
# Call it as a plain statement (not under ||, && or if), or errexit is off.
step() {
	local name=$1 start rc
	shift
	start=$(date +%s)
	log "==> $name"
	set +e
	(
		set -e
		"$@"
	)
	rc=$?
	set -e
	if [ "$rc" -ne 0 ]; then
		log "<== $name FAILED after $(($(date +%s) - start))s (exit $rc)"
		return "$rc"
	fi
	log "<== $name done in $(($(date +%s) - start))s"
}

# quiet LOG CMD...: runs CMD with its output in LOG.
quiet() {
	local log=$1
	shift
	"$@" >"$log" 2>&1
}

# hash_files FILE...: a short content hash, for cache keys.
hash_files() { cat "$@" | sha256sum | cut -c1-12; }

# debian_mirror prints the Debian archive this host's apt already uses, so
# that no mirror is written into the repository.
debian_mirror() {
	if [ -n "${SANDBOX_E2E_DEBIAN_MIRROR:-}" ]; then
		echo "$SANDBOX_E2E_DEBIAN_MIRROR"
		return
	fi
	local m
	m=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v -- '-security' | head -n1 || true)
	if [ -z "$m" ]; then
		m=$(grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | grep -v -- '-security' | head -n1 || true)
	fi
	[ -n "$m" ] || die "cannot find a Debian mirror in /etc/apt; set SANDBOX_E2E_DEBIAN_MIRROR"
	echo "$m"
}

# need_root_debian explains what to do when we cannot install packages ourselves.
can_apt() { [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; }

# Debian packages of each root filesystem we build.
# node: what kind's base image recipe installs and our node needs (systemd,
# the kubelet's and kube-proxy's tools, libseccomp2 for runc).
ROOTFS_NODE_PACKAGES="systemd,dbus,conntrack,iptables,nftables,ipset,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,e2fsprogs,bash,ca-certificates,curl,jq,procps"
# net: the base of the kube-proxy and kube-router images.
ROOTFS_NET_PACKAGES="iptables,ipset,conntrack,iproute2,kmod,ca-certificates"
# sandbox: the snippet runtime; python3, not python3-minimal (no http, ...),
# and the data-science packages agents use most (their Depends come along;
# debootstrap installs no Recommends). Keep the Dockerfile's list in step.
ROOTFS_SANDBOX_PACKAGES="python3,ca-certificates,python3-numpy,python3-pandas,python3-matplotlib"

# rootfs_tar NAME PACKAGES: prints the path of a cached tarball of a minbase
# Debian root filesystem with PACKAGES, building it with debootstrap first if
# needed.
rootfs_tar() {
	local name=$1 pkgs=$2 key tar dir
	key=$(echo "$DEBIAN_SUITE $pkgs" | sha256sum | cut -c1-12)
	tar="$SANDBOX_E2E_CACHE/rootfs/$name-$DEBIAN_SUITE-$key.tar"
	if [ -f "$tar" ]; then
		log "--- rootfs $name: cached in $tar"
		echo "$tar"
		return 0
	fi
	command -v debootstrap >/dev/null || die "debootstrap missing: run e2e/hack/host-setup.sh"
	mkdir -p "$SANDBOX_E2E_CACHE/rootfs"
	dir=$(mktemp -d "$SANDBOX_E2E_CACHE/rootfs/$name.XXXX")
	chmod 0755 "$dir" # it becomes the image's /
	local rc=0
	step "debootstrap $name ($pkgs)" quiet "$dir.log" debootstrap --variant=minbase --include="$pkgs" \
		"$DEBIAN_SUITE" "$dir" "$(debian_mirror)" || rc=$?
	if [ "$rc" -ne 0 ]; then
		tail -n 30 "$dir.log" >&2
		die "debootstrap $name failed (log: $dir.log)"
	fi
	chroot "$dir" apt-get clean
	rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin "$dir"/var/log/*.log
	tar --numeric-owner -C "$dir" -cf "$tar.tmp" .
	mv "$tar.tmp" "$tar"
	rm -rf "$dir" "$dir.log"
	echo "$tar"
}

# base_image NAME PACKAGES: prints the name of a Docker image of the cached
# root filesystem NAME, importing it first if Docker does not have it.
base_image() {
	local tar img
	tar=$(rootfs_tar "$1" "$2")
	img="sandbox-e2e/$1-base:$(basename "$tar" .tar | sed 's/^[a-z]*-//')"
	if ! docker image inspect "$img" >/dev/null 2>&1; then
		docker import "$tar" "$img" >/dev/null
	fi
	echo "$img"
}

# image_from BASE NAME STAGING [CHANGE...]: the image NAME is BASE plus the
# files under STAGING, with Dockerfile-style CHANGEs (ENV, USER, ENTRYPOINT,
# CMD, WORKDIR, LABEL). Docker refuses a tar that names a path twice, so the
# files go in with docker cp rather than by appending to the base's tar.
image_from() {
	local base=$1 name=$2 staging=$3 c
	shift 3
	c=$(docker create "$base" /nonexistent-placeholder)
	local args=(--change 'CMD []')
	local ch
	for ch in "$@"; do args+=(--change "$ch"); done
	if ! docker cp "$staging/." "$c:/" || ! docker commit "${args[@]}" "$c" "$name" >/dev/null; then
		docker rm -f "$c" >/dev/null
		return 1
	fi
	docker rm -f "$c" >/dev/null
}
