package local

import (
	"os"
	"testing"

	"github.com/sandboxd/sandbox/internal/exec"
)

// TestMain lets this test binary be an isolated run's init (see
// exec.MaybeInit).
func TestMain(m *testing.M) {
	if isInit, status := exec.MaybeInit(); isInit {
		os.Exit(status)
	}
	// TestThroughThePool runs tests again with every execution on a
	// pre-started interpreter.
	warmOnly = os.Getenv("SANDBOX_TEST_WARM_ONLY") != ""
	os.Exit(m.Run())
}
