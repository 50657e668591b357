package modes

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/sandboxd/sandbox/kube"
	"github.com/sandboxd/sandbox/runner"
	"github.com/sandboxd/sandbox/weaken"
)

// Run runs the chosen form.
func (c *RunCmd) Run(d *Deps) error {
	if c.CodeFile != "" {
		return c.runFile(d.Ctx, d.Stdout)
	}
	if c.Call {
		return c.serveCall(d)
	}
	opts := c.options()
	opts.Dir = c.Workdir
	if opts.Dir == "" {
		opts.Dir = kube.Workdir
	}
	opts.Env = c.snippetEnv(opts.Dir)
	if c.SeedTmp != "" {
		if err := runner.SeedTmp(c.SeedTmp, os.TempDir()); err != nil {
			return fmt.Errorf("runner: %w", err)
		}
	}
	id := c.SandboxID
	if id == "" {
		id, _ = os.Hostname()
	}
	log := slog.New(slog.NewJSONHandler(d.Stderr, nil))
	s, err := runner.New(runner.Options{
		Listen:       c.Listen,
		MaxTimeout:   c.MaxTimeout,
		SandboxID:    id,
		PodPidsLimit: c.PodPidsLimit,
		Exec:         opts,
		Logger:       log,

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
