# The README's two commands are `make run` and `make test`.
GO      ?= go
BIN     := bin/sandbox
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/sandboxd/sandbox/modes.version=$(VERSION)

.PHONY: build run test unit bench fmt vet clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) .

# run serves the API on this machine with the local backend.
run: build
	$(BIN) serve --backend local --listen 127.0.0.1:8080

# test runs the unit tests, then the e2e suite on a fresh kind cluster.
test: unit e2e

# unit is the quick everyday target: no cluster, no Docker.
unit:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin

# The kind cluster, the offline images and the e2e suite.
include e2e/e2e.mk
