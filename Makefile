# The README's two commands are `make run` and `make test`.
GO      ?= go
BIN     := bin/sandbox
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/sandboxd/sandbox/internal/modes.version=$(VERSION)

.PHONY: build dist run test unit python-test mcp-test lint bench bench-kind fmt vet clean

# GOBUILD is how every binary is built: static, without local paths,
# stamped with VERSION.
GOBUILD = CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)'

build:
	$(GOBUILD) -o $(BIN) .

# dist cross-builds the binary for each platform in DIST_PLATFORMS, as
# bin/dist/sandbox-OS-ARCH. Off Linux, exec, verify, manifests and serve
# --backend kubernetes work; run and serve --backend local say they need
# Linux.
DIST_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
dist:
	@mkdir -p bin/dist
	@set -e; for p in $(DIST_PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; echo "dist: bin/dist/sandbox-$$os-$$arch"; \
	  GOOS=$$os GOARCH=$$arch $(GOBUILD) -o bin/dist/sandbox-$$os-$$arch .; \
	done

# run serves the API on this machine with the local backend.
run: build
	$(BIN) serve --backend local --listen 127.0.0.1:8080

# test runs the unit tests and the linters, then the e2e suite on a fresh kind
# cluster.
test: unit lint e2e

# unit is the quick everyday target: no cluster, no Docker. It covers the root
# module only; the e2e suite is a module of its own (e2e/go.mod).
unit: python-test mcp-test
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

# python-test runs the tests of the Python package in python/ (standard
# library unittest) against the binary that build makes, which they serve
# with the local backend.
PYTHON ?= python3
python-test: build
	cd python && SANDBOX_BIN=$(CURDIR)/$(BIN) PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -m unittest discover -s tests -t .

# mcp-test runs an MCP client nobody here wrote, the official TypeScript
# SDK's (pinned; from npm into MCP_NPM_DIR, outside the repository, once),
# against `sandbox mcp --backend local` on stdio: it lists the tools and
# calls run_python (internal/mcpserver/testdata/client.mjs). Skipped, in so
# many words, only when npm cannot reach its registry.
MCP_SDK_VERSION ?= 1.32.2
MCP_NPM_DIR ?= /var/cache/sandbox-npm
mcp-test: build
	@sdk=$(MCP_NPM_DIR)/node_modules/@modelcontextprotocol/sdk/package.json; \
	if [ "$$(node -p "require('$$sdk').version" 2>/dev/null)" != "$(MCP_SDK_VERSION)" ]; then \
	  if ! npm ping >/dev/null 2>&1; then \
	    echo "mcp-test: SKIPPED: npm cannot reach its registry to install @modelcontextprotocol/sdk@$(MCP_SDK_VERSION)"; exit 0; \
	  fi; \
	  mkdir -p $(MCP_NPM_DIR) && cd $(MCP_NPM_DIR) && { [ -f package.json ] || echo '{"private":true}' > package.json; } && \
	  npm install --no-package-lock --no-audit --no-fund --loglevel=error @modelcontextprotocol/sdk@$(MCP_SDK_VERSION) || exit 1; \
	  cd $(CURDIR); \
	fi; \
	SANDBOX_NPM_DIR=$(MCP_NPM_DIR) SANDBOX_BIN=$(CURDIR)/$(BIN) node internal/mcpserver/testdata/client.mjs --backend local --log-level warn

# lint adds staticcheck (pinned, from the module proxy) to the unit target's
# go vet, vets the e2e module (e2e/go.mod, with its build tag) too, and vets
# the tree for darwin, whose files (the *_other.go ones) no Linux build
# reads; with dist's flags, so that it reuses what dist compiled. Then
# .ci/doclinks checks the Markdown: every relative link resolves, and the
# README's layout table matches the tree.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 $(GO) vet -trimpath ./...
	cd e2e && $(GO) vet -tags e2e ./...
	$(GO) run $(STATICCHECK) ./...
	cd e2e && $(GO) run $(STATICCHECK) -tags e2e ./...
	$(PYTHON) .ci/doclinks

# bench runs every benchmark (the runner's overhead over bare python3, the
# API's latency) and prints a table in milliseconds; the raw output, for
# benchstat, is in bin/bench.txt. One package at a time (-p 1): benchmarks
# of two packages side by side on two cores measure each other.
bench:
	@mkdir -p bin
	@$(GO) test -p 1 -run '^$$' -bench . -benchmem -benchtime 2s ./... > bin/bench.txt 2>&1; status=$$?; \
	grep -v '^Benchmark' bin/bench.txt; echo; \
	awk 'BEGIN { printf "%-52s %12s  %s\n", "benchmark", "ms/op", "metrics" } \
	  /^Benchmark/ { printf "%-52s %12.3f ", $$1, $$3 / 1e6; \
	    for (i = 5; i < NF; i += 2) { v = $$i; u = $$(i + 1); \
	      if (u ~ /-ns$$/) { v = sprintf("%.3f", v / 1e6); sub(/-ns$$/, "-ms", u) } \
	      printf " %s %s", v, u } \
	    print "" }' bin/bench.txt; \
	exit $$status

# bench-kind measures the service on the kind cluster (brought up, or
# brought up to date, by kind-up) in one run and prints one table: the floor
# (bare python3 in a pod), warm executions at concurrency 1, 3 and 10,
# kubectl run, the local backend, refill and pod start times, bare and
# sandbox pods churned, a burst, a steady overload and serve's peak memory.
# Raw samples: bin/bench-kind.json; the latency distributions:
# bin/bench-kind.png. About 15 minutes.
# BENCH_FLAGS='-compare NAME=V1,V2' also compares the warm path under each
# value of one of serve's environment variables, in turns (about 4 more
# minutes per value); '-compare node-cpu-weights=as-built,default' compares
# the kind node's CPU weights likewise, '-compare-overload 60s' adds an
# overload to each turn; '-phases floor,warm' runs only those.
BENCH_FLAGS ?=
bench-kind: kind-up
	cd e2e && $(GO) run ./cmd/sandbox-bench -out $(CURDIR)/bin $(BENCH_FLAGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin

# The kind cluster, the offline images and the e2e suite.
include e2e/e2e.mk
