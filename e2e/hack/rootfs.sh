#!/usr/bin/env bash
# rootfs.sh debootstraps (or finds cached) every Debian root filesystem the
# images use. It needs only the network, so it can run beside build-bins.sh.
source "$(dirname "$0")/lib.sh"

all() {
	rootfs_tar node "$ROOTFS_NODE_PACKAGES" >/dev/null
	rootfs_tar net "$ROOTFS_NET_PACKAGES" >/dev/null
	rootfs_tar sandbox "$ROOTFS_SANDBOX_PACKAGES" >/dev/null
}

step "root filesystems" all
