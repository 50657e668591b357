// Package oneshot holds the flags of `sandbox run` and its --code-file form:
// run one snippet here and print the result JSON.
//
// It is also the one package below main that ends the process, on purpose.
// Go runs every package's init before main, and in this binary that is about
// 10 ms of client-go, Prometheus and protobuf set-up that `run --code-file`
// never uses, against a target of at most 5 ms over bare python3. The Go
// spec fixes the order of package initialisation (by import path, each
// package after its imports), and this package imports only kong, exec and
// the standard library, so its init runs before the costly ones (client-go's
// scheme, the API types, Prometheus); some small ones still come first.
// When the command line is `sandbox run --code-file ...`, init runs the
// snippet and exits; for anything else it returns and the binary starts as
// usual, so every other command line, errors and --help included, is
// handled by package modes alone. TestEarlyExitSkipsHeavyInit guards the
// order.
package oneshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"github.com/sandboxd/sandbox/exec"
)

// Cmd is every flag of `sandbox run`, both forms. Package modes embeds it and
// adds the HTTP form; the flags are declared once, so both parsers agree.
type Cmd struct {
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
func (c *Cmd) Validate() error {
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

// Options are the exec options the flags ask for; Dir is left to the form.
func (c *Cmd) Options() exec.Options {
	return exec.Options{MaxOutput: c.MaxOutput, MemoryLimit: c.MemoryLimit, MaxProcs: c.MaxProcs,
		MaxFileSize: c.MaxFileSize, UnsafeKillLeaderOnly: c.UnsafeKillLeaderOnly}
}

// RunFile runs the --code-file snippet here and writes its result to stdout.
func (c *Cmd) RunFile(ctx context.Context, stdout io.Writer) error {
	code, err := readCode(c.CodeFile)
	if err != nil {
		return err
	}
	opts := c.Options()
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
	res, err := exec.Run(ctx, exec.Job{Code: code, Timeout: c.Timeout}, opts)
	if err != nil {
		return err
	}
	res.SandboxID = exec.LocalID()
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(res)
}

func init() {
	if len(os.Args) < 2 || os.Args[1] != "run" {
		return
	}
	if code, ok := early(os.Args[1:], os.Stdout, os.Stderr); ok {
		os.Exit(code)
	}
}

// early runs args if they are exactly a valid `run --code-file` command line
// and reports the exit code; ok is false, and nothing has happened, for any
// other command line. Its parser has no --help flag, so a request for help is
// an unknown flag here and goes on to the full parser with every error.
func early(args []string, stdout, stderr io.Writer) (code int, ok bool) {
	var cli struct {
		Run Cmd `cmd:""`
	}
	parser, err := kong.New(&cli, kong.Name("sandbox"), kong.NoDefaultHelp(), kong.Writers(io.Discard, io.Discard))
	if err != nil {
		return 0, false
	}
	if _, err := parser.Parse(args); err != nil || cli.Run.CodeFile == "" {
		return 0, false
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := cli.Run.RunFile(ctx, stdout); err != nil {
		fmt.Fprintf(stderr, "sandbox: %v\n", err)
		return 1, true
	}
	return 0, true
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
