package modes

import (
	"context"
	"log/slog"
	"strings"

	"github.com/sandboxd/sandbox/internal/exec"

	"github.com/sandboxd/sandbox/internal/local"
	"github.com/sandboxd/sandbox/internal/mcpserver"
	"github.com/sandboxd/sandbox/internal/server"
)

// localBackend builds the local backend, which runs snippets on this
// machine: Linux only, as exec's running is.
func (c *ServeCmd) localBackend(d *Deps, log *slog.Logger) (server.Backend, func(), error) {
	memory := c.MemoryLimitMB << 20
	if c.MemoryLimitMB <= 0 {
		memory = -1
	}
	preload, _ := exec.ParsePreload(c.Preload) // checked by Validate
	warm := c.Warm
	if warm <= 0 {
		warm = -1 // none
	}
	b, err := local.New(d.Ctx, local.Options{
		Python:        c.Python,
		MaxConcurrent: c.MaxConcurrent,
		QueueWait:     c.QueueWait,
		MaxOutput:     c.MaxOutput,
		MemoryLimit:   memory,
		Isolation:     c.Isolation,
		Warm:          warm,
		Preload:       preload,
		Logger:        log,
	})
	if err != nil {
		return nil, nil, err
	}
	reportMissing(d.Ctx, b, c.Preload, log)
	return b, func() {
		if err := b.Close(); err != nil {
			log.Warn("local backend: remove its directory", "error", err.Error())
		}
	}, nil
}

// reportMissing says, in one line, which modules of --preload the local
// python3 lacks and how to get them, so that a data snippet's
// ModuleNotFoundError is no surprise. A probe that fails is only logged.
func reportMissing(ctx context.Context, b *local.Backend, modules string, log *slog.Logger) {
	preload, _ := exec.ParsePreload(modules) // checked by Validate
	missing, err := b.MissingModules(ctx, preload)
	switch {
	case err != nil:
		log.Warn("local backend: could not check python3's modules", "error", err.Error())
	case len(missing) > 0:
		log.Warn("local backend: python3 lacks modules snippets are expected to have ("+local.InstallHint(missing)+")",
			"missing", strings.Join(missing, ","))
	}
}

// localRunner builds the local backend for `sandbox mcp --backend local`,
// with serve's defaults for what it has no flag for.
func (c *MCPCmd) localRunner(d *Deps, log *slog.Logger) (mcpserver.Runner, func(), error) {
	memory := c.MemoryLimitMB << 20
	if c.MemoryLimitMB <= 0 {
		memory = -1
	}
	b, err := local.New(d.Ctx, local.Options{
		Python:        c.Python,
		MaxConcurrent: c.MaxConcurrent,
		MemoryLimit:   memory,
		Isolation:     c.Isolation,
		Logger:        log,
	})
	if err != nil {
		return nil, nil, err
	}
	// The tool's description promises the sandbox image's modules: say
	// which of them this machine's python3 lacks.
	reportMissing(d.Ctx, b, exec.DefaultPreload, log)
	return mcpserver.Local{Backend: b}, func() {
		if err := b.Close(); err != nil {
			log.Warn("local backend: remove its directory", "error", err.Error())
		}
	}, nil
}
