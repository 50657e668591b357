package modes

import (
	"log/slog"
	"os"

	"github.com/sandboxd/sandbox/runner"
)

// Run runs the chosen form.
func (c *RunCmd) Run(d *Deps) error {
	if c.CodeFile != "" {
		return c.runFile(d.Ctx, d.Stdout)
	}
	opts := c.options()
	opts.Dir = c.Workdir
	if opts.Dir == "" {
		opts.Dir = "/work"
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
	})
	if err != nil {
		return err
	}
	if c.UnsafeKillLeaderOnly {
		log.Warn("runner deliberately weakened: --unsafe-kill-leader-only leaves the snippet's tree alive at the timeout")
	}
	return s.Run(d.Ctx)
}
