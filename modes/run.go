package modes

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/sandboxd/sandbox/exec"
	"github.com/sandboxd/sandbox/runner"
)

// RunCmd runs one snippet: from a file here (--code-file), or as the pod
// entrypoint that takes exactly one job over HTTP and then exits.
type RunCmd struct {
	CodeFile    string        `name:"code-file" env:"SANDBOX_CODE_FILE" placeholder:"FILE" help:"Run this Python file here and print the result JSON (- reads standard input). Without it, serve one job over HTTP."`
	Timeout     time.Duration `default:"20s" env:"SANDBOX_TIMEOUT" help:"Timeout of a --code-file snippet."`
	MaxTimeout  time.Duration `name:"max-timeout" default:"60s" env:"SANDBOX_MAX_TIMEOUT" help:"Longest timeout a job may ask for."`
	MaxOutput   int           `name:"max-output" default:"1048576" env:"SANDBOX_MAX_OUTPUT" help:"Bytes of stdout and of stderr kept (head and tail)."`
	MemoryLimit int64         `name:"memory-limit" default:"0" env:"SANDBOX_MEMORY_LIMIT" help:"Cap the snippet's address space at this many bytes (0: only the cgroup's limit)."`
	MaxProcs    int           `name:"max-procs" default:"0" env:"SANDBOX_MAX_PROCS" help:"RLIMIT_NPROC of the snippet (0: 1024)."`
	MaxFileSize int64         `name:"max-file-size" default:"0" env:"SANDBOX_MAX_FILE_SIZE" help:"Largest file the snippet may write, in bytes (0: 100 MiB)."`
	Workdir     string        `env:"SANDBOX_WORKDIR" placeholder:"DIR" help:"Working directory of the snippet (default: a fresh temporary directory with --code-file, /work when serving)."`
	Listen      string        `default:":8080" env:"SANDBOX_LISTEN" help:"Address to serve the one job on."`
	SandboxID   string        `name:"sandbox-id" env:"SANDBOX_ID" help:"Sandbox id put in the result when serving (default: the host name, which is the pod name)."`

	UnsafeKillLeaderOnly bool `name:"unsafe-kill-leader-only" hidden:"" help:"At the timeout kill only the snippet's own process, not its tree, to show that verify catches it. Never in production."`
}

// Validate checks the flags before anything runs.
func (c *RunCmd) Validate() error {
	switch {
	case c.Timeout <= 0:
		return errors.New("--timeout must be positive")
	case c.MaxTimeout <= 0:
		return errors.New("--max-timeout must be positive")
	case c.CodeFile != "" && c.Timeout > c.MaxTimeout:
		return fmt.Errorf("--timeout %s is over --max-timeout %s", c.Timeout, c.MaxTimeout)
	case c.MaxOutput <= 0:
		return errors.New("--max-output must be positive")
	case c.MemoryLimit < 0 || c.MaxProcs < 0 || c.MaxFileSize < 0:
		return errors.New("--memory-limit, --max-procs and --max-file-size must not be negative")
	}
	return nil
}

// Run runs the chosen form.
func (c *RunCmd) Run(d *Deps) error {
	opts := exec.Options{MaxOutput: c.MaxOutput, MemoryLimit: c.MemoryLimit, MaxProcs: c.MaxProcs, MaxFileSize: c.MaxFileSize,
		UnsafeKillLeaderOnly: c.UnsafeKillLeaderOnly}
	if c.CodeFile != "" {
		return c.runFile(d, opts)
	}
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

// runFile runs one snippet here and prints its Result.
func (c *RunCmd) runFile(d *Deps, opts exec.Options) error {
	code, err := readCode(c.CodeFile)
	if err != nil {
		return err
	}
	opts.Dir = c.Workdir
	if opts.Dir == "" {
		dir, err := os.MkdirTemp("", "sandbox-run-")
		if err != nil {
			return fmt.Errorf("run: %w", err)
		}
		defer os.RemoveAll(dir)
		opts.Dir = dir
	} else if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	res, err := exec.Run(d.Ctx, exec.Job{Code: code, Timeout: c.Timeout}, opts)
	if err != nil {
		return err
	}
	res.SandboxID = newLocalID()
	enc := json.NewEncoder(d.Stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(res)
}

func readCode(file string) (string, error) {
	var (
		b   []byte
		err error
	)
	if file == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return "", fmt.Errorf("read code: %w", err)
	}
	return string(b), nil
}

// newLocalID returns a fresh sandbox id for a run outside any pod.
func newLocalID() string {
	var b [8]byte
	rand.Read(b[:]) // never fails on Linux (Go 1.24+)
	return "local-" + hex.EncodeToString(b[:])
}
