package exec

import (
	"os"
	"testing"
)

// TestMain lets this test binary be an isolated run's init (see MaybeInit).
func TestMain(m *testing.M) {
	if isInit, status := MaybeInit(); isInit {
		os.Exit(status)
	}
	os.Exit(m.Run())
}
