package modes

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/internal/server"
)

// ServeCmd serves the sandbox HTTP API with the local or the Kubernetes
// backend.
type ServeCmd struct {
	Backend         string        `enum:"auto,local,kubernetes" default:"auto" env:"SANDBOX_BACKEND" help:"Where executions run: kubernetes (a warm pool of one-use pods), local (processes on this machine; weaker isolation), or auto: kubernetes inside a cluster (KUBERNETES_SERVICE_HOST set), else local."`
	Listen          string        `default:"${listen}" env:"SANDBOX_LISTEN" help:"Address to serve the API on."`
	MaxBody         int64         `name:"max-body" default:"${max_body}" help:"Largest request body in bytes; larger gets 413."`
	ShutdownTimeout time.Duration `name:"shutdown-timeout" default:"${shutdown_timeout}" help:"On SIGTERM, how long executions in flight may finish before they are cancelled."`
	LogFormat       string        `name:"log-format" enum:"auto,text,json" default:"auto" env:"SANDBOX_LOG_FORMAT" help:"Log format on stderr: text, json, or auto (json for the kubernetes backend, text for local)."`
	LogLevel        string        `name:"log-level" enum:"debug,info,warn,error" default:"info" help:"Least severe log level shown."`

	MaxConcurrent int           `name:"max-concurrent" group:"local" help:"Local backend: executions at once (default 2 per CPU); more wait in a queue."`
	QueueWait     time.Duration `name:"queue-wait" group:"local" default:"${queue_wait}" help:"Local backend: how long an execution waits for a free slot before 503."`
	Isolation     string        `enum:"${isolations}" group:"local" default:"${isolation}" help:"Local backend: as root each run gets its own uid, namespaces, read-only host, private /tmp, cgroups, no_new_privs and no new user namespaces. auto takes what the host allows and logs what it lacks, strict refuses to start without all of it, none turns it off."`
	Python        string        `group:"local" help:"Local backend: the interpreter (default python3 from the standard PATH)."`
	MaxOutput     int           `name:"max-output" group:"local" help:"Local backend: bytes kept per stream (default ${max_output})."`
	MemoryLimitMB int64         `name:"memory-limit-mb" group:"local" default:"${memory_limit_mb}" help:"Local backend: each run's memory in MiB (its memory cgroup, else its address space); 0 for none."`
	Warm          int           `group:"local" default:"${warm}" env:"SANDBOX_WARM" help:"Local backend: python3 interpreters kept started ahead (at most --max-concurrent), each with --preload imported and used for one execution, then replaced; 0 for none."`

	KubeFlags `embed:""`
	ToolFlags `embed:"" group:"tool calls"`
	AuthFlags `embed:"" group:"callers"`
}

// Run builds the backend and serves until SIGINT or SIGTERM, then drains.
func (c *ServeCmd) Run(d *Deps) error {
	backend := c.Backend
	if backend == "auto" {
		backend = "local"
		if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
			backend = "kubernetes"
		}
	}
	log, err := c.logger(d.Stderr, backend)
	if err != nil {
		return err
	}
	var (
		b       server.Backend
		cleanup func()
	)
	switch backend {
	case "kubernetes":
		b, cleanup, err = newKubeBackend(&c.KubeFlags, log)
	default:
		b, cleanup, err = c.localBackend(d, log)
	}
	if err != nil {
		return fmt.Errorf("%s backend: %w", backend, err)
	}
	// After Run: the server has drained, so no execution uses the backend.
	defer cleanup()
	var (
		caller server.Caller
		policy api.CallPolicy
	)
	if len(c.ToolImages) > 0 {
		if backend != "kubernetes" {
			return fmt.Errorf("--tool-images: tool calls need the kubernetes backend (this is %s)", backend)
		}
		var stop func()
		caller, policy, stop, err = newToolCaller(&c.KubeFlags, &c.ToolFlags, log)
		if err != nil {
			return fmt.Errorf("tool calls: %w", err)
		}
		defer stop()
	}

	authn, gate, err := newAuth(d.Ctx, &c.AuthFlags, &c.KubeFlags, backend, c.Listen, policy, log)
	if err != nil {
		return err
	}
	srv, err := server.New(server.Options{
		Backend:         b,
		Logger:          log,
		MaxBody:         c.MaxBody,
		Listen:          c.Listen,
		ShutdownTimeout: c.ShutdownTimeout,
		Caller:          caller,
		CallPolicy:      policy,
		Auth:            authn,
		Gate:            gate,
		Version:         version,
	})
	if err != nil {
		return err
	}
	log.Info("sandbox serve", "version", version, "backend", backend, "listen", c.Listen, "auth", c.authMode(backend))
	return srv.Run(d.Ctx)
}

// logger builds the slog logger on stderr.
func (c *ServeCmd) logger(w io.Writer, backend string) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	format := c.LogFormat
	if format == "auto" {
		format = "text"
		if backend == "kubernetes" {
			format = "json"
		}
	}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

// Validate checks the flags kong cannot.
func (c *ServeCmd) Validate() error {
	switch {
	case c.MaxBody < 1:
		return fmt.Errorf("--max-body %d: must be positive", c.MaxBody)
	case c.MaxConcurrent < 0:
		return fmt.Errorf("--max-concurrent %d: must not be negative", c.MaxConcurrent)
	case c.QueueWait <= 0:
		return fmt.Errorf("--queue-wait %s: must be positive", c.QueueWait)
	case c.ShutdownTimeout <= 0:
		return fmt.Errorf("--shutdown-timeout %s: must be positive", c.ShutdownTimeout)
	case c.MaxOutput < 0:
		return fmt.Errorf("--max-output %d: must not be negative", c.MaxOutput)
	}
	if _, err := exec.ParsePreload(c.Preload); err != nil {
		return fmt.Errorf("--preload: %w", err)
	}
	return nil
}
