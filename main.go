// Command sandbox runs untrusted Python for AI agents in one-use Kubernetes pods.
//
// The modes live in package modes; main only hands it the process's arguments
// and streams and turns its error into an exit code.
package main

import (
	"os"

	"github.com/sandboxd/sandbox/modes"
)

func main() {
	os.Exit(modes.Main(os.Args[1:], os.Stdout, os.Stderr))
}
