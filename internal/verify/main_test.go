package verify

import (
	"os"
	"testing"

	"github.com/sandboxd/sandbox/internal/exec"
)

// TestMain lets this test binary be an isolated run's init (see
// exec.MaybeInit).
func TestMain(m *testing.M) {
	if isInit, _ := exec.MaybeInit(); isInit {
		os.Exit(127)
	}
	os.Exit(m.Run())
}
