#!/usr/bin/env bash
# build-bins.sh builds every binary the offline kind cluster needs from the Go
# module proxy and caches each set by version under $SANDBOX_E2E_CACHE/bin.
# A second run reuses what is there. Prints each step and its duration.
# Usage: build-bins.sh          build all
#        build-bins.sh --print  print the directory of each set (NAME=DIR)
source "$(dirname "$0")/lib.sh"

BIN_CACHE="$SANDBOX_E2E_CACHE/bin"
export CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false"
LDFLAGS_STRIP="-s -w"

# The Kubernetes set is keyed by the tools module too: changing a pin there
# must rebuild it.
k8s_key() { echo "$K8S_VERSION-$(hash_files "$TOOLS_DIR/go.mod" "$TOOLS_DIR/go.sum")"; }
pause_key() { hash_files "$TOOLS_DIR"/cmd/pause/*.go; }
kube_router_key() { echo "$KUBE_ROUTER_VERSION-$(hash_files "$KUBE_ROUTER_DIR/go.mod" "$KUBE_ROUTER_DIR/go.sum")"; }

declare -A SETS=(
	[kubernetes]="kubernetes-$(k8s_key)"
	[coredns]="coredns-$COREDNS_VERSION"
	[containerd]="containerd-$CONTAINERD_VERSION"
	[runc]="runc-$RUNC_VERSION"
	[crictl]="crictl-$CRICTL_VERSION"
	[cni]="cni-plugins-$CNI_PLUGINS_VERSION"
	[kube-router]="kube-router-$(kube_router_key)"
	[pause]="pause-$(pause_key)"
)

if [ "${1:-}" = "--print" ]; then
	for k in "${!SETS[@]}"; do echo "$k=$BIN_CACHE/${SETS[$k]}"; done
	exit 0
fi

# cached NAME FUNC: runs FUNC OUTDIR unless the set is already built. FUNC
# writes into a scratch directory that is renamed into place only on success.
cached() {
	local name=$1 fn=$2 dir="$BIN_CACHE/${SETS[$1]}"
	if [ -f "$dir/.done" ]; then
		log "--- $name: cached in $dir"
		return 0
	fi
	local tmp="$dir.tmp.$$"
	rm -rf "$dir".tmp.* && mkdir -p "$tmp" # and what an interrupted build left

	step "build $name (${SETS[$name]})" "$fn" "$tmp"
	touch "$tmp/.done"
	rm -rf "$dir" && mv "$tmp" "$dir"
}

build_kubernetes() {
	local out=$1 minor=${K8S_VERSION#v1.}
	minor=${minor%%.*}
	local ld="$LDFLAGS_STRIP"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld="$ld -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
		ld="$ld -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
	done
	local cmd
	for cmd in kubeadm kubectl kubelet kube-apiserver kube-controller-manager kube-scheduler kube-proxy; do
		step "  go build $cmd" bash -c "cd '$TOOLS_DIR' && go build -ldflags '$ld' -o '$out/$cmd' k8s.io/kubernetes/cmd/$cmd"
	done
	# etcd comes from the same module graph: k8s.io/kubernetes requires
	# go.etcd.io/etcd/server/v3 at the version kubeadm expects.
	step "  go build etcd" bash -c "cd '$TOOLS_DIR' && go build -ldflags '$LDFLAGS_STRIP' -o '$out/etcd' go.etcd.io/etcd/server/v3"
}

gobin() { # gobin OUT PKG@VER...
	local out=$1
	shift
	GOBIN="$out" go install -ldflags "$LDFLAGS_STRIP" "$@"
}

build_coredns() { gobin "$1" "github.com/coredns/coredns@$COREDNS_VERSION"; }
build_crictl() { gobin "$1" "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"; }
build_kube_router() {
	local m=github.com/cloudnativelabs/kube-router/v2
	(cd "$KUBE_ROUTER_DIR" && go build -ldflags "$LDFLAGS_STRIP -X $m/pkg/version.Version=$KUBE_ROUTER_VERSION" \
		-o "$1/kube-router" "$m/cmd/kube-router")
}

build_containerd() {
	local m=github.com/containerd/containerd/v2/cmd
	GOBIN="$1" go install -tags "no_btrfs no_devmapper no_zfs" -ldflags "$LDFLAGS_STRIP" \
		"$m/containerd@$CONTAINERD_VERSION" "$m/ctr@$CONTAINERD_VERSION" \
		"$m/containerd-shim-runc-v2@$CONTAINERD_VERSION"
}

build_runc() {
	# runc needs cgo for seccomp (libseccomp-dev); the node image carries
	# the matching libseccomp2.
	CGO_ENABLED=1 GOBIN="$1" go install -tags seccomp -ldflags "$LDFLAGS_STRIP" \
		"github.com/opencontainers/runc@$RUNC_VERSION"
}

build_cni() {
	local m=github.com/containernetworking/plugins/plugins
	gobin "$1" "$m/main/ptp@$CNI_PLUGINS_VERSION" "$m/main/loopback@$CNI_PLUGINS_VERSION" \
		"$m/ipam/host-local@$CNI_PLUGINS_VERSION" "$m/meta/portmap@$CNI_PLUGINS_VERSION"
}

build_pause() {
	(cd "$TOOLS_DIR" && go build -ldflags "$LDFLAGS_STRIP" -o "$1/pause" ./cmd/pause)
}

check_cgo() {
	command -v gcc >/dev/null && [ -e /usr/include/seccomp.h ] && return 0
	can_apt || die "runc needs gcc and libseccomp-dev; install them (Debian: apt-get install gcc libc6-dev libseccomp-dev pkg-config)"
	step "apt-get install build deps" bash -c 'DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc libc6-dev libseccomp-dev pkg-config >/dev/null'
}

main() {
	mkdir -p "$BIN_CACHE"
	cached pause build_pause
	cached kubernetes build_kubernetes
	cached containerd build_containerd
	check_cgo
	cached runc build_runc
	cached crictl build_crictl
	cached cni build_cni
	cached coredns build_coredns
	cached kube-router build_kube_router
}

step "build binaries" main
