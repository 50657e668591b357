package modes

import (
	"fmt"
	"runtime"
)

// version is the release; the Makefile sets it with
// -ldflags -X github.com/sandboxd/sandbox/internal/modes.version=....
var version = "dev"

// VersionCmd prints the version.
type VersionCmd struct{}

// Run prints the version, the Go version and the platform.
func (c *VersionCmd) Run(d *Deps) error {
	_, err := fmt.Fprintf(d.Stdout, "sandbox %s (%s %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return err
}
