//go:build !linux

package modes

import (
	"bytes"
	"strings"
	"testing"
)

// TestNeedsLinux: off Linux, the modes that run snippets here fail at once
// with one line that says why, and exit non-zero.
func TestNeedsLinux(t *testing.T) {
	for _, args := range [][]string{
		{"run", "--code-file", "-"},
		{"run"},
		{"serve", "--backend", "local", "--listen", "127.0.0.1:0"},
		{"mcp", "--backend", "local"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(args, &stdout, &stderr)
		if code == 0 || strings.Count(stderr.String(), "\n") != 1 || !strings.Contains(stderr.String(), "needs Linux") {
			t.Errorf("%q: exit %d, stderr %q", args, code, stderr.String())
		}
	}
}
