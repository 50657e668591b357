#!/usr/bin/env bash
# agent-image.sh builds the sample agent image $AGENT_IMAGE
# (sandbox-e2e/agent:dev) offline: the sandbox image's cached Debian base
# with python3, the tools package of e2e/agent and this repository's
# python/sandbox_client, in /app (WORKDIR and PYTHONPATH). Tool pods run it
# under a random uid, so every file is readable by all. It is rebuilt only
# when those files change.
# Usage: agent-image.sh
source "$(dirname "$0")/lib.sh"

AGENT_IMAGE=${AGENT_IMAGE:-sandbox-e2e/agent:dev}
AGENT_SRC="$E2E_DIR/agent"
CLIENT_SRC="$REPO_ROOT/python/sandbox_client"

# Sorted so that the hash does not depend on the order find lists them in.
mapfile -t files < <(find "$AGENT_SRC" "$CLIENT_SRC" -type f -name '*.py' | LC_ALL=C sort)
[ "${#files[@]}" -gt 0 ] || die "no Python files under $AGENT_SRC and $CLIENT_SRC"
sum=$(hash_files "${files[@]}")
have=$(docker image inspect "$AGENT_IMAGE" --format '{{index .Config.Labels "dev.sandbox.agent"}}' 2>/dev/null || true)
if [ "$have" = "$sum" ]; then
	log "--- $AGENT_IMAGE: up to date ($sum)"
	exit 0
fi

build() {
	local base s
	base=$(base_image sandbox "$ROOTFS_SANDBOX_PACKAGES")
	mkdir -p "$SANDBOX_E2E_CACHE/work"
	s=$(mktemp -d "$SANDBOX_E2E_CACHE/work/agent.XXXX")
	chmod 0755 "$s"
	mkdir -p "$s/app"
	cp -r "$AGENT_SRC/tools" "$s/app/tools"
	cp "$AGENT_SRC/driver.py" "$s/app/driver.py"
	cp -r "$CLIENT_SRC" "$s/app/sandbox_client"
	find "$s/app" -name '__pycache__' -prune -exec rm -rf {} +
	chmod -R a+rX,go-w "$s/app"
	image_from "$base" "$AGENT_IMAGE" "$s" \
		'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		'ENV PYTHONPATH=/app' \
		'ENV AGENT_SAMPLE=1' \
		'WORKDIR /app' \
		'ENTRYPOINT ["python3"]' \
		'CMD ["/app/driver.py"]' \
		"LABEL dev.sandbox.agent=$sum"
	rm -rf "$s"
}

step "image $AGENT_IMAGE" build
