// Package server is the HTTP face of the sandbox: it decodes requests, hands
// them to a Backend, and writes results, errors, health and metrics.
package server

import (
	"context"

	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/wire"
)

// Backend runs one validated job in a fresh sandbox. A returned *api.Error
// chooses the HTTP status (503 with Retry-After when no sandbox is free);
// any other error is a 500 naming it.
type Backend interface {
	Execute(ctx context.Context, job exec.Job) (wire.Result, error)
	// Ready reports whether this process can take a request (it may still
	// have to wait for a sandbox); it backs /readyz.
	Ready() bool
}
