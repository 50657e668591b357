#!/usr/bin/env bash
# host-setup.sh makes this machine able to run the offline kind cluster:
# the host packages the build needs, a running Docker engine, and, only on
# hosts whose capability bounding set lacks a capability Docker asks for under
# --privileged, our runc-nocap wrapper as Docker's default runtime.
source "$(dirname "$0")/lib.sh"

WRAPPER_DIR=/usr/local/lib/sandbox-e2e
WRAPPER=$WRAPPER_DIR/runc-nocap
DOCKERD_LOG=${SANDBOX_E2E_DOCKERD_LOG:-/var/log/sandbox-e2e-dockerd.log}

# Debian packages: the engine, debootstrap for the root filesystems, the
# toolchain and libseccomp for runc, iptables for Docker's networks.
PACKAGES=(docker.io debootstrap iptables gcc libc6-dev libseccomp-dev pkg-config)

missing_packages() {
	local p
	for p in "${PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
	done
}

install_packages() {
	if ! command -v dpkg-query >/dev/null; then
		command -v dockerd >/dev/null && command -v debootstrap >/dev/null && return 0
		die "not a Debian host: install a Docker engine, debootstrap, gcc and libseccomp headers yourself"
	fi
	local missing
	missing=$(missing_packages | tr '\n' ' ')
	[ -z "${missing// /}" ] && return 0
	can_apt || die "missing packages: $missing (run as root: apt-get install $missing)"
	log "installing: $missing"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

docker_up() { timeout 10 docker info >/dev/null 2>&1; }

start_dockerd() {
	docker_up && return 0
	command -v dockerd >/dev/null || die "no dockerd on this host"
	log "starting dockerd (log: $DOCKERD_LOG)"
	# No init system here: dockerd runs in the background, detached from
	# this shell, and outlives the script.
	setsid nohup dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
	local i
	for i in $(seq 60); do
		docker_up && return 0
		sleep 1
	done
	tail -n 20 "$DOCKERD_LOG" >&2 || true
	die "dockerd did not come up in 60s"
}

# needs_wrapper: true when the bounding set lacks CAP_SYS_RESOURCE (bit 24),
# which Docker requests for every --privileged container.
needs_wrapper() {
	local bnd
	bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
	(((0x$bnd >> 24) & 1)) && return 1
	return 0
}

install_wrapper() {
	mkdir -p "$WRAPPER_DIR"
	(cd "$TOOLS_DIR" && CGO_ENABLED=0 go build -trimpath -o "$WRAPPER.new" ./cmd/runc-nocap)
	mv "$WRAPPER.new" "$WRAPPER"
	mkdir -p /etc/docker
	local want
	want=$(printf '{\n  "runtimes": {"runc-nocap": {"path": "%s"}},\n  "default-runtime": "runc-nocap"\n}\n' "$WRAPPER")
	if [ -f /etc/docker/daemon.json ] && ! grep -q runc-nocap /etc/docker/daemon.json; then
		die "/etc/docker/daemon.json exists and is not ours: add the runtime $WRAPPER as the default by hand"
	fi
	if [ "$(cat /etc/docker/daemon.json 2>/dev/null)" != "$want" ]; then
		echo "$want" >/etc/docker/daemon.json
		# dockerd reloads runtimes and default-runtime on SIGHUP.
		if pidof dockerd >/dev/null; then
			kill -HUP "$(pidof dockerd)"
			sleep 2
		fi
	fi
}

main() {
	install_packages
	if needs_wrapper; then
		log "capability bounding set lacks CAP_SYS_RESOURCE: using the runc-nocap runtime"
		install_wrapper
	fi
	start_dockerd
	if needs_wrapper; then
		local rt
		rt=$(docker info --format '{{.DefaultRuntime}}')
		[ "$rt" = runc-nocap ] || die "dockerd's default runtime is $rt, not runc-nocap: restart dockerd"
	fi
	log "docker $(docker version --format '{{.Server.Version}}') is up"
}

step "host setup" main
