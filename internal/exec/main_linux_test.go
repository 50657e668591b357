package exec

import (
	"os"
	"testing"
)

// TestMain lets this test binary be an isolated run's init (see MaybeInit).
func TestMain(m *testing.M) {
	if isInit, _ := MaybeInit(); isInit {
		os.Exit(127)
	}
	os.Exit(m.Run())
}
