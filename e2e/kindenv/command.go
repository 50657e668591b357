// Package kindenv brings up and tears down the offline kind cluster the e2e
// suite and `make kind-up` use: it runs the image scripts in e2e/hack,
// creates the cluster through the sigs.k8s.io/kind library, loads the
// sandbox image, starts the stand-ins for the metadata service and the
// internet, and deploys `sandbox manifests`.
package kindenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// RunError is a failed command with what it printed, so that a failure
// says what ran and what it said.
type RunError struct {
	Cmd    string
	Output string
	Err    error
}

func (e *RunError) Error() string {
	out := strings.TrimSpace(e.Output)
	if len(out) > 4000 {
		out = "..." + out[len(out)-4000:]
	}
	return fmt.Sprintf("%s: %v\n%s", e.Cmd, e.Err, out)
}

func (e *RunError) Unwrap() error { return e.Err }

// cmd describes one command run.
type cmd struct {
	name    string
	args    []string
	stdin   io.Reader
	stderr  io.Writer // progress goes here as it happens, besides the error text
	env     []string
	timeout time.Duration
}

// output runs c and returns its stdout. Stderr is kept for the error and,
// when c.stderr is set, streamed there as well.
func (c cmd) output(ctx context.Context) (string, error) {
	if c.timeout == 0 {
		c.timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	x := exec.CommandContext(ctx, c.name, c.args...)
	x.Stdin = c.stdin
	x.WaitDelay = 5 * time.Second
	if c.env != nil {
		x.Env = append(os.Environ(), c.env...)
	}
	var stdout, stderr bytes.Buffer
	x.Stdout = &stdout
	x.Stderr = &stderr
	if c.stderr != nil {
		x.Stderr = io.MultiWriter(&stderr, c.stderr)
	}
	if err := x.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (after %s)", ctx.Err(), c.timeout)
		}
		return stdout.String(), &RunError{
			Cmd:    strings.Join(append([]string{c.name}, c.args...), " "),
			Output: stderr.String() + stdout.String(),
			Err:    err,
		}
	}
	return stdout.String(), nil
}

// RepoRoot finds the repository root by walking up from the working
// directory to the go.mod of module github.com/sandboxd/sandbox.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/sandboxd/sandbox\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no github.com/sandboxd/sandbox go.mod above the working directory")
		}
		dir = parent
	}
}
