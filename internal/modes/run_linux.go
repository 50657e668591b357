package modes

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/runner"
	"github.com/sandboxd/sandbox/internal/weaken"
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
	opts.Preload, _ = exec.ParsePreload(c.Preload) // checked by Validate
	if !c.PreloadAlways {
		opts.PreloadGate = exec.WhenCPUIdle(exec.PreloadIdleWindow)
	}
	if c.SeedTmp != "" {
		if err := runner.SeedTmp(c.SeedTmp, os.TempDir()); err != nil {
			return fmt.Errorf("runner: %w", err)
		}
	}
	return c.serveRunner(d, runner.Options{PodPidsLimit: c.PodPidsLimit, Exec: opts})
}

// serveRunner serves the one job or call of a pod with o and the flags the
// two forms share: the listener, the longest timeout, the sandbox id, the
// seal and the weakenings.
func (c *RunCmd) serveRunner(d *Deps, o runner.Options) error {
	o.SandboxID = c.SandboxID
	if o.SandboxID == "" {
		o.SandboxID, _ = os.Hostname()
	}
	o.Listen = c.Listen
	o.MaxTimeout = c.MaxTimeout
	o.Logger = slog.New(slog.NewJSONHandler(d.Stderr, nil))
	o.SealTargets = c.sealTargets()
	o.Resolver = c.Resolver
	o.WeakenUnprovenReady = c.weakenings().Has(weaken.UnprovenReady)
	s, err := runner.New(o)
	if err != nil {
		return err
	}
	if names := c.weakenings().Names(true); names != nil {
		o.Logger.Warn("runner deliberately weakened for verify's negative tests", "weaken", names)
	}
	return s.Run(d.Ctx)
}
