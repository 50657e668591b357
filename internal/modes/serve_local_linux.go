package modes

import (
	"log/slog"

	"github.com/sandboxd/sandbox/internal/local"
	"github.com/sandboxd/sandbox/internal/server"
)

// localBackend builds the local backend, which runs snippets on this
// machine: Linux only, as exec's running is.
func (c *ServeCmd) localBackend(d *Deps, log *slog.Logger) (server.Backend, func(), error) {
	memory := c.MemoryLimitMB << 20
	if c.MemoryLimitMB <= 0 {
		memory = -1
	}
	b, err := local.New(d.Ctx, local.Options{
		Python:        c.Python,
		MaxConcurrent: c.MaxConcurrent,
		QueueWait:     c.QueueWait,
		MaxOutput:     c.MaxOutput,
		MemoryLimit:   memory,
		Isolation:     c.Isolation,
		Logger:        log,
	})
	if err != nil {
		return nil, nil, err
	}
	return b, func() {
		if err := b.Close(); err != nil {
			log.Warn("local backend: remove its directory", "error", err.Error())
		}
	}, nil
}
