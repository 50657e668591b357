#!/usr/bin/env bash
# sandbox-image.sh builds the image $SANDBOX_IMAGE (sandbox:dev) offline: a
# minbase Debian with python3, numpy, pandas and matplotlib (cached) plus the
# static sandbox binary, run as uid 65532. It is rebuilt when the binary, the
# root filesystem or this script changes.
# Usage: sandbox-image.sh [BINARY]   (default: builds bin/sandbox with make)
source "$(dirname "$0")/lib.sh"

UID_SANDBOX=65532

# Matplotlib's caches are built here at build time, read-only in the image;
# the runner links them into the pod's writable /tmp before its job
# (SANDBOX_SEED_TMP), where MPLCONFIGDIR points: matplotlib refuses a
# read-only MPLCONFIGDIR (it warns and rebuilds its font list on every run).
# Keep the Dockerfile in step.
SEED_DIR=/usr/share/sandbox/tmp
SNIPPET_ENV="MPLBACKEND=Agg,MPLCONFIGDIR=/tmp/matplotlib"

bin=${1:-}
if [ -z "$bin" ]; then
	step "build sandbox binary" make -C "$REPO_ROOT" --no-print-directory build >&2
	bin="$REPO_ROOT/bin/sandbox"
fi
[ -x "$bin" ] || die "no sandbox binary at $bin"

base=$(base_image sandbox "$ROOTFS_SANDBOX_PACKAGES")
sum="$(sha256sum "$bin" | cut -c1-16)-$(echo "$base" | sha256sum | cut -c1-8)-$(hash_files "$0" | cut -c1-8)"
have=$(docker image inspect "$SANDBOX_IMAGE" --format '{{index .Config.Labels "dev.sandbox.binary"}}' 2>/dev/null || true)
if [ "$have" = "$sum" ]; then
	log "--- $SANDBOX_IMAGE: up to date ($sum)"
	exit 0
fi

build() {
	local s
	mkdir -p "$SANDBOX_E2E_CACHE/work"
	s=$(mktemp -d "$SANDBOX_E2E_CACHE/work/sandbox.XXXX")
	chmod 0755 "$s"
	install -D -m 0755 "$bin" "$s/usr/local/bin/sandbox"
	mkdir -p "$s/etc" "$s$SEED_DIR/matplotlib"
	docker run --rm --entrypoint cat "$base" /etc/passwd >"$s/etc/passwd"
	docker run --rm --entrypoint cat "$base" /etc/group >"$s/etc/group"
	echo "sandbox:x:$UID_SANDBOX:$UID_SANDBOX:sandbox:/nonexistent:/usr/sbin/nologin" >>"$s/etc/passwd"
	echo "sandbox:x:$UID_SANDBOX:" >>"$s/etc/group"
	# The font list, built by the image's own matplotlib; also a smoke test
	# of the data-science packages. No network: it runs offline.
	docker run --rm --network none --entrypoint python3 -e MPLCONFIGDIR=/seed/matplotlib -e MPLBACKEND=Agg \
		-v "$s$SEED_DIR:/seed" "$base" \
		-c 'import numpy, pandas, matplotlib.font_manager, matplotlib.pyplot' >&2
	ls "$s$SEED_DIR"/matplotlib/fontlist-*.json >/dev/null || die "matplotlib wrote no font list"
	chmod -R a+rX "$s$SEED_DIR"
	image_from "$base" "$SANDBOX_IMAGE" "$s" \
		'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		"ENV SANDBOX_SNIPPET_ENV=$SNIPPET_ENV" \
		"ENV SANDBOX_SEED_TMP=$SEED_DIR" \
		"USER $UID_SANDBOX:$UID_SANDBOX" \
		'WORKDIR /tmp' \
		'ENTRYPOINT ["/usr/local/bin/sandbox"]' \
		'CMD ["run"]' \
		"LABEL dev.sandbox.binary=$sum"
	rm -rf "$s"
}

step "image $SANDBOX_IMAGE" build
