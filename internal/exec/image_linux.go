package exec

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/sandboxd/sandbox/wire"
)

// RunInImage runs job.Code like Run, with the same limits, deadline,
// process-tree kill and bounded output, but as a program of the image it
// runs in rather than as an isolated snippet: Python's isolated mode (-I) is
// off, so the image's PYTHONPATH, its site-packages and the working
// directory's modules are importable, as a tool in an agent's image expects.
// Tool calls use it; the code is the service's own call shim, never the
// caller's. Job.Files must be empty: a tool's inputs are its arguments.
func RunInImage(ctx context.Context, job Job, opts Options) (wire.Result, error) {
	if len(job.Files) > 0 {
		return wire.Result{}, fmt.Errorf("%w: files are not taken here", ErrInvalidJob)
	}
	su, err := prepare(job, &opts)
	if err != nil {
		return wire.Result{}, err
	}
	defer os.Remove(su.snippet)
	if err := becomeSubreaper(); err != nil {
		return wire.Result{}, fmt.Errorf("run: %w", err)
	}
	return start(ctx, opts, su.timeout, su.python, openArgs(pythonArgs(opts, su.snippet, -1)), su.env, nil)
}

// openArgs drops isolated mode from Run's interpreter flags and keeps the
// rest (unbuffered, no .pyc files, the preamble that sets the limits).
func openArgs(args []string) []string {
	return slices.DeleteFunc(slices.Clone(args), func(a string) bool { return a == "-I" })
}
