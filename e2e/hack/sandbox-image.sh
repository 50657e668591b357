#!/usr/bin/env bash
# sandbox-image.sh builds the image $SANDBOX_IMAGE (sandbox:dev) offline: a
# minbase Debian with python3 (cached) plus the static sandbox binary, run as
# uid 65532. It is rebuilt only when the binary changes.
# Usage: sandbox-image.sh [BINARY]   (default: builds bin/sandbox with make)
source "$(dirname "$0")/lib.sh"

UID_SANDBOX=65532

bin=${1:-}
if [ -z "$bin" ]; then
	step "build sandbox binary" make -C "$REPO_ROOT" --no-print-directory build >&2
	bin="$REPO_ROOT/bin/sandbox"
fi
[ -x "$bin" ] || die "no sandbox binary at $bin"

sum=$(sha256sum "$bin" | cut -c1-16)
have=$(docker image inspect "$SANDBOX_IMAGE" --format '{{index .Config.Labels "dev.sandbox.binary"}}' 2>/dev/null || true)
if [ "$have" = "$sum" ]; then
	log "--- $SANDBOX_IMAGE: up to date (binary $sum)"
	exit 0
fi

build() {
	local base s
	base=$(base_image sandbox "$ROOTFS_SANDBOX_PACKAGES")
	mkdir -p "$SANDBOX_E2E_CACHE/work"
	s=$(mktemp -d "$SANDBOX_E2E_CACHE/work/sandbox.XXXX")
	chmod 0755 "$s"
	install -D -m 0755 "$bin" "$s/usr/local/bin/sandbox"
	mkdir -p "$s/etc"
	docker run --rm --entrypoint cat "$base" /etc/passwd >"$s/etc/passwd"
	docker run --rm --entrypoint cat "$base" /etc/group >"$s/etc/group"
	echo "sandbox:x:$UID_SANDBOX:$UID_SANDBOX:sandbox:/nonexistent:/usr/sbin/nologin" >>"$s/etc/passwd"
	echo "sandbox:x:$UID_SANDBOX:" >>"$s/etc/group"
	image_from "$base" "$SANDBOX_IMAGE" "$s" \
		'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		"USER $UID_SANDBOX:$UID_SANDBOX" \
		'WORKDIR /tmp' \
		'ENTRYPOINT ["/usr/local/bin/sandbox"]' \
		'CMD ["run"]' \
		"LABEL dev.sandbox.binary=$sum"
	rm -rf "$s"
}

step "image $SANDBOX_IMAGE" build
