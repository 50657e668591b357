// Package modes wires the sandbox binary's subcommands with kong. Each mode is
// a struct with a Run method in a file of its own; nothing below this package
// exits the process.
package modes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"
)

// CLI is the root of the command line.
type CLI struct {
	Run       RunCmd       `cmd:"" help:"Pod entrypoint: run exactly one snippet, then exit."`
	Serve     ServeCmd     `cmd:"" help:"Serve the sandbox HTTP API."`
	Exec      ExecCmd      `cmd:"" help:"Send a snippet to a sandbox service and print its output."`
	MCP       MCPCmd       `cmd:"" name:"mcp" help:"Serve the run_python tool over MCP on stdio, for a desktop assistant or an IDE agent."`
	Manifests ManifestsCmd `cmd:"" help:"Print the Kubernetes manifests that deploy the service."`
	Verify    VerifyCmd    `cmd:"" help:"Prove the deployment's security properties against a live cluster."`
	Egress    EgressCmd    `cmd:"" help:"Serve the egress gateway: tool pods with an allow list of names reach the internet through it only."`
	Version   VersionCmd   `cmd:"" help:"Print the version."`
}

// Deps is what every mode's Run method receives: the process's streams and a
// context cancelled on SIGINT or SIGTERM.
type Deps struct {
	Ctx    context.Context
	Stdout io.Writer
	Stderr io.Writer
}

// ExitError asks Main to exit with Code without printing anything more; the
// exec client uses it to pass on a snippet's exit code.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// kongExit unwinds out of kong when it asks to exit (after --help, say), so
// that Main returns the code instead of kong calling os.Exit.
type kongExit struct{ code int }

// Main parses args, runs the chosen mode and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) (code int) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var cli CLI
	parser, err := kong.New(&cli,
		kong.Name("sandbox"),
		kong.Description("One-use Python sandboxes for AI agents on Kubernetes."),
		kong.UsageOnError(),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { panic(kongExit{code}) }),
		vars(),
	)
	if err != nil {
		fmt.Fprintf(stderr, "sandbox: %v\n", err)
		return 2
	}
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(kongExit)
			if !ok {
				panic(r)
			}
			code = e.code
		}
	}()
	kctx, err := parser.Parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "sandbox: %v\n", err)
		return 2
	}
	err = kctx.Run(&Deps{Ctx: ctx, Stdout: stdout, Stderr: stderr})
	var ee *ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.Code
	default:
		fmt.Fprintf(stderr, "sandbox: %v\n", err)
		return 1
	}
}
