# The offline kind cluster, its images and the e2e suite.
# Everything is built on this machine and cached under $(SANDBOX_E2E_CACHE)
# (default /var/cache/sandbox-e2e): the first run takes 30-40 minutes, later
# ones a few.
#
#   make kind-up     build what is missing, create (or reuse) cluster "sandbox", deploy the service
#   make kind-down   delete the cluster and the stand-ins
#   make e2e         the e2e suite on a fresh cluster, deleted at the end
#                    (SANDBOX_E2E_KEEP=1 keeps it; SANDBOX_E2E_REUSE=1 uses the running one)
#   make e2e E2E_RUN=TestNetworkPolicy   one test

E2E_RUN     ?=
E2E_TIMEOUT ?= 100m
E2E_FLAGS   ?= -v

.PHONY: e2e kind-up kind-down e2e-images e2e-tools-test

kind-up:
	$(GO) run ./e2e/cmd/sandbox-kind up

kind-down:
	$(GO) run ./e2e/cmd/sandbox-kind down

# e2e-images prepares the host and builds every image without a cluster.
e2e-images:
	e2e/hack/host-setup.sh
	e2e/hack/node-image.sh
	e2e/hack/sandbox-image.sh

# The tools module is a separate module: `go test ./...` at the root skips it.
e2e-tools-test:
	cd e2e/tools && $(GO) vet ./cmd/... && $(GO) test -count=1 ./cmd/...

e2e: e2e-tools-test
	@start=$$(date +%s); \
	$(GO) test -tags e2e -count=1 -timeout $(E2E_TIMEOUT) $(E2E_FLAGS) $(if $(E2E_RUN),-run '$(E2E_RUN)') ./e2e/; \
	rc=$$?; echo "e2e: $$(( $$(date +%s) - start ))s in all (exit $$rc)"; exit $$rc
