package verify

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
	os.Exit(m.Run())
}
