package modes

import (
	"os"
	"testing"

	"github.com/sandboxd/sandbox/internal/exec"
)

// asBinary, set to 1 in a test binary's environment, makes it the sandbox
// binary: Main with its arguments.
const asBinary = "SANDBOX_MODES_TEST_AS_BINARY"

// TestMain lets this test binary be an isolated run's init (see
// exec.MaybeInit), or the sandbox binary itself (asBinary).
func TestMain(m *testing.M) {
	if isInit, status := exec.MaybeInit(); isInit {
		os.Exit(status)
	}
	// Tests that need the binary as a process of its own (sandbox mcp on
	// stdio) start this test binary again with asBinary set.
	if os.Getenv(asBinary) == "1" {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
