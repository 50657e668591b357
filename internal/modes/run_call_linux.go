package modes

import (
	"errors"
	"fmt"
	"os"

	"github.com/sandboxd/sandbox/internal/runner"
)

// serveCall is `sandbox run --call`, a tool pod's entrypoint: it serves one
// POST /v1/call and exits. The working directory and the environment are
// the image's: a tool imports what its image gives it.
func (c *RunCmd) serveCall(d *Deps) error {
	if c.CodeFile != "" {
		return errors.New("--call and --code-file: choose one")
	}
	opts := c.options()
	opts.Python = c.Python
	opts.Dir = c.Workdir
	if opts.Dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return fmt.Errorf("run --call: working directory: %w", err)
		}
		opts.Dir = wd
	}
	return c.serveRunner(d, runner.Options{Exec: opts, Call: true, CallEnv: runner.ToolEnv(os.Environ())})
}
