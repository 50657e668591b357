// Command sandbox runs untrusted Python for AI agents in one-use Kubernetes pods.
//
// The modes live in package modes; main only hands it the process's arguments
// and streams and turns its error into an exit code.
package main

import (
	"os"

	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/internal/modes"
)

func main() {
	// First: this binary is also the init of every isolated run (the local
	// backend's, run --code-file's as root), started again as argv[0]
	// "sandbox-init". That process must set up its sandbox and start python3
	// before anything else of ours runs: no flag parsing, no logging, no
	// goroutine that could hold a thread or a file of serve's. It exits with
	// python3's status, or, having told serve what failed, 127, without a word.
	if isInit, status := exec.MaybeInit(); isInit {
		os.Exit(status)
	}
	os.Exit(modes.Main(os.Args[1:], os.Stdout, os.Stderr))
}
