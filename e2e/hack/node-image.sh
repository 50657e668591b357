#!/usr/bin/env bash
# node-image.sh builds the kind node image offline and prints its name.
# Everything comes from this machine: binaries from build-bins.sh, a
# debootstrapped Debian, kind's node files from the sigs.k8s.io/kind module,
# and every image the cluster runs, assembled here and preloaded into the
# node's containerd. The tag is a hash of all inputs, so a second run with
# nothing changed only prints the name.
source "$(dirname "$0")/lib.sh"

"$E2E_HACK/build-bins.sh" >&2
eval "$("$E2E_HACK/build-bins.sh" --print | sed 's/^\([a-z-]*\)=/BIN_\1=/; s/^BIN_kube-router/BIN_kuberouter/')"

KIND_DIR=$(cd "$REPO_ROOT" && go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$KIND_DIR/images/base/files" ] || die "kind module not found ($KIND_DIR)"
KIND_FILES="$KIND_DIR/images/base/files"

tag=$( {
	cat "$E2E_HACK/lib.sh" "$0" "$E2E_DIR"/node/*
	find "$KIND_FILES" -type f -print0 | sort -z | xargs -0 cat
	echo "$BIN_kubernetes $BIN_coredns $BIN_containerd $BIN_runc $BIN_crictl $BIN_cni $BIN_kuberouter $BIN_pause"
} | sha256sum | cut -c1-12)
NODE_IMAGE="$NODE_IMAGE_REPO:$K8S_VERSION-$tag"

if docker image inspect "$NODE_IMAGE" >/dev/null 2>&1; then
	log "--- node image: cached as $NODE_IMAGE"
	echo "$NODE_IMAGE"
	exit 0
fi

WORK="$SANDBOX_E2E_CACHE/work"
mkdir -p "$WORK"
# Every image to preload into the node, one a line (steps run in subshells,
# so the list lives in a file).
IMAGES_LIST="$WORK/node-images.list"
PATH_ENV='ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

# scratch_image NAME STAGING [CHANGE...]: an image of only the files under STAGING.
scratch_image() {
	local name=$1 staging=$2
	shift 2
	local args=(-c "$PATH_ENV") c
	for c in "$@"; do args+=(-c "$c"); done
	tar --numeric-owner --owner=0 --group=0 -C "$staging" -c . | docker import "${args[@]}" - "$name" >/dev/null
	echo "$name" >>"$IMAGES_LIST"
}

# net_image NAME STAGING: the net root filesystem (iptables, ipset,
# conntrack) plus the files under STAGING.
net_image() {
	image_from "$NET_BASE" "$1" "$2" "$PATH_ENV"
	echo "$1" >>"$IMAGES_LIST"
}

# staging DIR BIN...: a minimal filesystem (users, /tmp) plus BINs in /usr/local/bin.
staging() {
	local dir=$1
	shift
	rm -rf "$dir" && mkdir -p "$dir/usr/local/bin" "$dir/etc" "$dir/tmp"
	chmod 0755 "$dir"
	chmod 1777 "$dir/tmp"
	printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n' >"$dir/etc/passwd"
	printf 'root:x:0:\nnobody:x:65534:\n' >"$dir/etc/group"
	echo 'hosts: files dns' >"$dir/etc/nsswitch.conf"
	cp "$@" "$dir/usr/local/bin/"
}

component_images() {
	local list ref name s="$WORK/staging"
	: >"$IMAGES_LIST"
	NET_BASE=$(base_image net "$ROOTFS_NET_PACKAGES")
	# kubeadm names the images it wants (and their registry); we build each
	# under that exact name.
	list=$("$BIN_kubernetes/kubeadm" config images list --kubernetes-version "$K8S_VERSION")
	for ref in $list; do
		name=${ref##*/}
		name=${name%%:*}
		case $name in
		kube-apiserver | kube-controller-manager | kube-scheduler | etcd)
			staging "$s" "$BIN_kubernetes/$name"
			scratch_image "$ref" "$s"
			;;
		kube-proxy)
			# It execs iptables and conntrack.
			staging "$s" "$BIN_kubernetes/kube-proxy"
			net_image "$ref" "$s"
			;;
		coredns)
			staging "$s" "$BIN_coredns/coredns"
			scratch_image "$ref" "$s" 'ENTRYPOINT ["/usr/local/bin/coredns"]'
			;;
		pause)
			staging "$s" "$BIN_pause/pause"
			scratch_image "$ref" "$s" 'ENTRYPOINT ["/usr/local/bin/pause"]'
			# kind's containerd config names its own pause tag.
			local kind_pause
			kind_pause=$(sed -n 's/^ *sandbox_image = "\(.*\)"/\1/p' "$KIND_FILES/etc/containerd/config.toml")
			[ -n "$kind_pause" ] || die "no sandbox_image in kind's containerd config"
			docker tag "$ref" "$kind_pause"
			echo "$kind_pause" >>"$IMAGES_LIST"
			;;
		*) die "kubeadm wants an image we do not build: $ref" ;;
		esac
	done
	staging "$s" "$BIN_kuberouter/kube-router"
	net_image "sandbox-e2e/kube-router:$KUBE_ROUTER_VERSION" "$s"
	rm -rf "$s"
	log "    images: $(tr '\n' ' ' <"$IMAGES_LIST")"
}

node_rootfs() {
	local root="$WORK/node-rootfs" node_tar
	node_tar=$(rootfs_tar node "$ROOTFS_NODE_PACKAGES")
	rm -rf "$root" && mkdir -p "$root"
	tar --numeric-owner -C "$root" -xf "$node_tar"

	# kind's node files, with the modes its base recipe gives them.
	install -d -m 0755 "$root/kind" "$root/kind/bin" "$root/kind/manifests" "$root/etc/kubernetes/manifests"
	cp -r "$KIND_FILES/kind/." "$root/kind/"
	chmod -R u+w,go-w "$root/kind"
	chmod 0644 "$root"/kind/*.txt
	chmod 0755 "$root"/kind/bin/*
	install -m 0755 "$KIND_FILES"/usr/local/bin/* "$root/usr/local/bin/"
	local d
	for d in etc etc/containerd etc/default etc/sysctl.d etc/systemd/system etc/systemd/system/kubelet.service.d; do
		install -d "$root/$d"
		find "$KIND_FILES/$d" -maxdepth 1 -type f -exec install -m 0644 {} "$root/$d/" \;
	done
	# Without CAP_SYS_RESOURCE nothing may lower an oom_score_adj; containerd
	# must not try, or every pod fails to start.
	sed -i 's/^\( *restrict_oom_score_adj\) = false/\1 = true/' "$root/etc/containerd/config.toml"
	grep -q 'restrict_oom_score_adj = true' "$root/etc/containerd/config.toml" || die "could not set restrict_oom_score_adj"

	# The base recipe's systemd clean-up.
	find "$root/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
	rm -f "$root"/lib/systemd/system/multi-user.target.wants/* "$root"/etc/systemd/system/*.wants/* \
		"$root"/lib/systemd/system/local-fs.target.wants/* "$root"/lib/systemd/system/sockets.target.wants/*udev* \
		"$root"/lib/systemd/system/sockets.target.wants/*initctl* "$root"/lib/systemd/system/basic.target.wants/*
	echo "ReadKMsg=no" >>"$root/etc/systemd/journald.conf"
	ln -sf /usr/lib/systemd/systemd "$root/sbin/init"
	chroot "$root" systemctl enable kubelet.service containerd.service undo-mount-hacks.service >/dev/null 2>&1
	chroot "$root" systemctl mask systemd-binfmt.service >/dev/null 2>&1

	# Binaries.
	install -m 0755 "$BIN_containerd"/{containerd,ctr,containerd-shim-runc-v2} "$BIN_crictl/crictl" "$root/usr/local/bin/"
	install -D -m 0755 "$BIN_runc/runc" "$root/usr/local/sbin/runc"
	install -d "$root/opt/cni/bin"
	install -m 0755 "$BIN_cni"/{ptp,host-local,portmap,loopback} "$root/opt/cni/bin/"
	install -m 0755 "$BIN_kubernetes"/{kubelet,kubeadm,kubectl} "$root/usr/bin/"
	"$BIN_containerd/ctr" oci spec |
		chroot "$root" jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"} | del(.process.rlimits)' \
			>"$root/etc/containerd/cri-base.json"

	# What kind reads from the node: the version, the CNI and storage manifests.
	echo -n "$K8S_VERSION" >"$root/kind/version"
	sed "s/KUBE_ROUTER_VERSION/$KUBE_ROUTER_VERSION/" "$E2E_DIR/node/default-cni.yaml" >"$root/kind/manifests/default-cni.yaml"
	install -m 0644 "$E2E_DIR/node/default-storage.yaml" "$root/kind/manifests/"
	install -D -m 0644 "$E2E_DIR/node/10-ptp.conflist" "$root/etc/cni/net.d/10-ptp.conflist"
	local s
	for s in system.slice kubelet.slice; do
		install -D -m 0644 "$E2E_DIR/node/10-cpu-weight.conf" "$root/etc/systemd/system/$s.d/10-cpu-weight.conf"
	done
	# kubeadm applies these to the control plane's static pods (the cluster's
	# InitConfiguration names the directory).
	install -d "$root/kind/kubeadm-patches"
	for s in etcd kube-apiserver kube-controller-manager kube-scheduler; do
		printf 'spec:\n  containers:\n  - name: %s\n    resources:\n      requests:\n        cpu: %s\n' "$s" "$CONTROL_PLANE_CPU_REQUEST" \
			>"$root/kind/kubeadm-patches/$s+strategic.yaml"
	done

	tar --numeric-owner -C "$root" -c . | docker import \
		-c 'ENV container=docker' \
		-c 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
		- "$NODE_IMAGE-rootfs" >/dev/null
	rm -rf "$root"
}

# preload starts containerd in a container of the rootfs image, imports every
# component image pinned (so the kubelet never collects them), and commits.
preload() {
	local c="sandbox-e2e-node-build-$$" i
	docker rm -f "$c" >/dev/null 2>&1 || true
	docker run -d --privileged --name "$c" --entrypoint=sleep "$NODE_IMAGE-rootfs" infinity >/dev/null
	# The step runs in a subshell: remove the build container however it ends.
	# shellcheck disable=SC2064
	trap "docker rm -f $c >/dev/null 2>&1 || true" EXIT
	docker exec -d "$c" sh -c 'containerd >/var/log/containerd-build.log 2>&1'
	for i in $(seq 60); do
		docker exec "$c" ctr version >/dev/null 2>&1 && break
		[ "$i" -eq 60 ] && die "containerd did not start in the build container"
		sleep 1
	done
	local img
	while read -r img; do
		log "    preload $img"
		docker save "$img" | docker exec -i "$c" ctr -n k8s.io images import \
			--label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack --digests - >/dev/null 2>&1
	done <"$IMAGES_LIST"
	docker exec "$c" ctr -n k8s.io images ls -q 2>/dev/null | grep -v '@sha256:\|^sha256:' >&2
	docker exec "$c" pkill containerd || true
	sleep 2
	docker commit \
		--change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
		--change 'ENV container=docker' \
		"$c" "$NODE_IMAGE" >/dev/null
	docker rm -f "$c" >/dev/null
	docker rmi "$NODE_IMAGE-rootfs" >/dev/null
}

step "component images" component_images
step "node root filesystem" node_rootfs
step "preload images into the node" preload
# Older node images are 1.2 GB each: drop those no container uses.
# (grep finds nothing when this is the only one: not an error.)
docker images "$NODE_IMAGE_REPO" --format '{{.Repository}}:{{.Tag}}' | { grep -vxF "$NODE_IMAGE" || true; } |
	while read -r old; do docker rmi "$old" >/dev/null 2>&1 || true; done
log "node image: $NODE_IMAGE"
echo "$NODE_IMAGE"
