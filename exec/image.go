package exec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// RunInImage runs job.Code like Run, with the same limits, deadline,
// process-tree kill and bounded output, but as a program of the image it
// runs in rather than as an isolated snippet: Python's isolated mode (-I) is
// off, so the image's PYTHONPATH, its site-packages and the working
// directory's modules are importable, as a tool in an agent's image expects.
// Tool calls use it; the code is the service's own call shim, never the
// caller's. Job.Files must be empty: a tool's inputs are its arguments.
func RunInImage(ctx context.Context, job Job, opts Options) (Result, error) {
	if opts.Dir == "" {
		return Result{}, errors.New("run: no working directory")
	}
	if len(job.Files) > 0 {
		return Result{}, fmt.Errorf("%w: files are not taken here", ErrInvalidJob)
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return Result{}, fmt.Errorf("run: %w", err)
	}
	opts.Dir = dir
	timeout := job.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	env := opts.Env
	if env == nil {
		env = DefaultEnv(opts.Dir)
	}
	python, err := findPython(opts.Python, env)
	if err != nil {
		return Result{}, err
	}
	var owner *[2]int
	if c := opts.Credential; c != nil {
		owner = &[2]int{int(c.Uid), int(c.Gid)}
	}
	code, err := writeSnippet(job.Code, owner)
	if err != nil {
		return Result{}, err
	}
	defer os.Remove(code)
	if err := becomeSubreaper(); err != nil {
		return Result{}, fmt.Errorf("run: %w", err)
	}
	return start(ctx, opts, timeout, python, openArgs(pythonArgs(opts, code)), env, nil)
}

// openArgs drops isolated mode from Run's interpreter flags and keeps the
// rest (unbuffered, no .pyc files, the preamble that sets the limits).
func openArgs(args []string) []string {
	return slices.DeleteFunc(slices.Clone(args), func(a string) bool { return a == "-I" })
}
