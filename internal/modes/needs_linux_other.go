//go:build !linux

package modes

import (
	"fmt"
	"log/slog"
	"runtime"

	"github.com/sandboxd/sandbox/internal/mcpserver"
	"github.com/sandboxd/sandbox/internal/server"
)

// The modes that run snippets on this machine need Linux: exec isolates a
// run with namespaces, cgroups and seccomp, which only Linux has. Elsewhere
// they fail at once, in one line that says so; exec, verify, manifests and
// serve --backend kubernetes work.

// needsLinux is the error of such a mode.
func needsLinux(what string) error {
	return fmt.Errorf("%s needs Linux (runs are isolated with namespaces, cgroups and seccomp); this binary is for %s/%s",
		what, runtime.GOOS, runtime.GOARCH)
}

// Run refuses: the runner and --code-file run snippets here.
func (c *RunCmd) Run(*Deps) error { return needsLinux("sandbox run") }

// localBackend refuses: the local backend runs snippets here.
func (c *ServeCmd) localBackend(*Deps, *slog.Logger) (server.Backend, func(), error) {
	return nil, nil, needsLinux("serve --backend local (the default outside a cluster)")
}

// localRunner refuses: the local backend runs snippets here.
func (c *MCPCmd) localRunner(*Deps, *slog.Logger) (mcpserver.Runner, func(), error) {
	return nil, nil, needsLinux("sandbox mcp --backend local")
}
