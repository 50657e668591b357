# The offline kind cluster, its images and the e2e suite.
# Everything is built on this machine and cached under $(SANDBOX_E2E_CACHE)
# (default /var/cache/sandbox-e2e): the first run builds for about 14 minutes, later
# ones a few.
#
#   make kind-up     build what is missing, create (or reuse) cluster "sandbox", deploy the service
#                    (SANDBOX_E2E_WORKERS=2: a control plane and two workers instead of one node)
#   make kind-down   delete the cluster and the stand-ins
#   make e2e         the e2e suite on a fresh cluster, deleted at the end
#                    (SANDBOX_E2E_KEEP=1 keeps it; SANDBOX_E2E_REUSE=1 uses the running one)
#   make e2e E2E_RUN=TestNetworkPolicy   one test
#   make e2e-multinode   the multi-node tests on a fresh cluster of two workers (not in make test)

E2E_RUN     ?=
E2E_TIMEOUT ?= 100m
E2E_FLAGS   ?= -v

.PHONY: e2e e2e-multinode kind-up kind-down e2e-images e2e-tools-test

# The suite, kindenv and cmd/sandbox-kind are the module in e2e/go.mod (so
# kind, e2e-framework and controller-runtime stay out of the root module's
# dependencies): every go command for them runs in e2e/.
kind-up:
	cd e2e && $(GO) run ./cmd/sandbox-kind up

kind-down:
	cd e2e && $(GO) run ./cmd/sandbox-kind down

# e2e-images prepares the host and builds every image without a cluster.
e2e-images:
	e2e/hack/host-setup.sh
	e2e/hack/node-image.sh
	e2e/hack/sandbox-image.sh

# The tools module (e2e/tools/go.mod) stays a module apart from the suite's:
# building k8s.io/kubernetes needs replace lines pinning every staging module
# at v0.37.0, which would also hold the suite's client-go there, below the
# product's. `go test ./...` in the root or in e2e/ skips it. The harness's
# own unit tests (bench, kindenv: no cluster, no e2e tag) run here too.
e2e-tools-test:
	cd e2e/tools && $(GO) vet ./cmd/... && $(GO) test -count=1 ./cmd/...
	cd e2e && $(GO) test -count=1 ./...

# The suite's output is long (-v): each failed test's last lines are repeated
# at the end, where a reader of a CI log that kept only the tail still finds
# them (test2json reads which test each line of the -v log belongs to).
e2e: e2e-tools-test
	@mkdir -p bin; start=$$(date +%s); \
	{ cd e2e && $(GO) test -tags e2e -count=1 -timeout $(E2E_TIMEOUT) $(E2E_FLAGS) $(if $(E2E_RUN),-run '$(E2E_RUN)') ./ 2>&1; \
	  echo $$? > $(CURDIR)/bin/e2e.rc; } | tee bin/e2e.log; \
	rc=$$(cat bin/e2e.rc); echo "e2e: $$(( $$(date +%s) - start ))s in all (exit $$rc); the setup's phases and the slowest tests:"; \
	grep -E '^=== (phase .* done in|setup took)' bin/e2e.log | grep -vE 'done in ([0-9](\.[0-9]+)?|[0-9.]+m)s$$' ; \
	grep -E '^--- (PASS|FAIL|SKIP): Test' bin/e2e.log | sort -t'(' -k2 -rn | head -12; \
	if [ "$$rc" != 0 ]; then echo "e2e: what failed:"; \
	  (cd e2e && $(GO) tool test2json -t < $(CURDIR)/bin/e2e.log | $(GO) run ./cmd/sandbox-failures); \
	  grep -E -A12 -- '^panic:' bin/e2e.log | head -30; fi; \
	exit $$rc

# e2e-multinode: a fresh cluster of a control plane and two workers, the
# tests a second node gives something to show, then deleted (as make e2e:
# SANDBOX_E2E_KEEP=1 keeps it). The cluster is named "sandbox" like the
# single-node one, which it replaces: the machine holds one cluster at a
# time (the stand-ins are shared, and 2 CPUs run one). TestLostNode runs
# first (go test keeps file order) and leaves both workers up again;
# TestNetworkPolicy (its probes cross nodes) and TestVerify then run on
# the cluster it restored.
E2E_MULTINODE_RUN ?= ^(TestLostNode|TestNetworkPolicy|TestVerify)$$
e2e-multinode:
	$(MAKE) e2e SANDBOX_E2E_WORKERS=2 E2E_RUN='$(E2E_MULTINODE_RUN)'
