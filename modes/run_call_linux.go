package modes

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/sandboxd/sandbox/runner"
	"github.com/sandboxd/sandbox/weaken"
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
	id := c.SandboxID
	if id == "" {
		id, _ = os.Hostname()
	}
	log := slog.New(slog.NewJSONHandler(d.Stderr, nil))
	s, err := runner.New(runner.Options{
		Listen:     c.Listen,
		MaxTimeout: c.MaxTimeout,
		SandboxID:  id,
		Exec:       opts,
		Logger:     log,
		Call:       true,
		CallEnv:    runner.ToolEnv(os.Environ()),

		SealTargets:         c.sealTargets(),
		Resolver:            c.Resolver,
		UnsafeUnprovenReady: c.unsafe().Has(weaken.UnprovenReady),
	})
	if err != nil {
		return err
	}
	if names := c.unsafe().Names(true); names != nil {
		log.Warn("runner deliberately weakened for verify's negative tests", "unsafe", names)
	}
	return s.Run(d.Ctx)
}
