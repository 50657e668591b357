package modes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/mcpserver"
)

// MCPCmd serves the run_python tool over MCP's stdio transport, for a
// desktop assistant or an IDE agent that starts it: on a deployment
// (--url), or on a local backend in this process (--backend local).
type MCPCmd struct {
	Backend   string `enum:"remote,local" default:"remote" env:"SANDBOX_MCP_BACKEND" help:"Where run_python runs: remote (the sandbox service at --url) or local (processes on this machine, isolated as serve --backend local isolates them; Linux only)."`
	URL       string `env:"SANDBOX_URL" default:"http://${listen}" help:"Base URL of the sandbox service (--backend remote)."`
	TokenFile string `name:"token-file" env:"SANDBOX_TOKEN_FILE" placeholder:"PATH" help:"File of the bearer token to send, read for each call (default: ${token_file}, when it exists)."`
	LogLevel  string `name:"log-level" enum:"debug,info,warn,error" default:"info" help:"Least severe log level shown on stderr (stdout is the protocol)."`

	Isolation     string `enum:"${isolations}" group:"local" default:"${isolation}" help:"--backend local: as serve's --isolation."`
	Python        string `group:"local" help:"--backend local: the interpreter (default python3 from the standard PATH)."`
	MaxConcurrent int    `name:"max-concurrent" group:"local" help:"--backend local: runs at once (default 2 per CPU); more wait."`
	MemoryLimitMB int64  `name:"memory-limit-mb" group:"local" default:"${memory_limit_mb}" help:"--backend local: each run's memory in MiB; 0 for none."`
}

// Validate checks the flags kong cannot.
func (c *MCPCmd) Validate() error {
	if c.MaxConcurrent < 0 {
		return fmt.Errorf("--max-concurrent %d: must not be negative", c.MaxConcurrent)
	}
	return nil
}

// Run serves MCP on stdin and stdout until the client closes stdin or the
// process is told to stop. Logs go to stderr only: stdout is the protocol.
func (c *MCPCmd) Run(d *Deps) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(d.Stderr, &slog.HandlerOptions{Level: level}))
	var runner mcpserver.Runner
	switch c.Backend {
	case "local":
		r, cleanup, err := c.localRunner(d, log)
		if err != nil {
			return fmt.Errorf("local backend: %w", err)
		}
		// After Run: the session is over, so no call uses the backend.
		defer cleanup()
		runner = r
	default:
		cl, err := newClient(c.URL, c.TokenFile)
		if err != nil {
			return err
		}
		runner = mcpserver.Remote{Client: cl}
	}
	log.Info("sandbox mcp: serving run_python on stdio", "version", version, "backend", c.Backend, "url", c.urlShown())
	srv := mcpserver.New(runner, mcpserver.Options{Version: version, Logger: log})
	err := srv.Run(d.Ctx, &mcp.IOTransport{Reader: os.Stdin, Writer: nopCloser{d.Stdout}})
	if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		return nil // told to stop, or the client went away: both are the end of a session
	}
	return err
}

// urlShown is --url when it is used.
func (c *MCPCmd) urlShown() string {
	if c.Backend == "local" {
		return ""
	}
	return c.URL
}

// nopCloser keeps the SDK from closing stdout, which Main's caller owns.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// newClient is the client of url, with the token of tokenFile, or the
// default token source when it is "".
func newClient(url, tokenFile string) (*client.Client, error) {
	if tokenFile == "" {
		return client.New(url)
	}
	return client.New(url, client.WithTokenSource(client.TokenFile(tokenFile)))
}
