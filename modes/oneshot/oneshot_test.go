package oneshot

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/exec"
)

// TestEarly checks which command lines the early path takes: exactly the
// valid --code-file ones. Every other one must come back untouched, with
// nothing run and nothing written, for package modes to answer.
func TestEarly(t *testing.T) {
	file := filepath.Join(t.TempDir(), "snippet.py")
	if err := os.WriteFile(file, []byte("print(6 * 7)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	declined := []struct {
		name string
		args []string
	}{
		{"HTTP form", []string{"run", "--listen", "127.0.0.1:0"}},
		{"help", []string{"run", "--code-file", file, "--help"}},
		{"short help", []string{"run", "-h", "--code-file", file}},
		{"unknown flag", []string{"run", "--code-file", file, "--bogus"}},
		{"stray argument", []string{"run", "--code-file", file, "extra"}},
		{"invalid timeout", []string{"run", "--code-file", file, "--timeout", "0s"}},
		{"timeout over the maximum", []string{"run", "--code-file", file, "--timeout", "2m"}},
		{"bad number", []string{"run", "--code-file", file, "--max-output", "lots"}},
	}
	for _, tc := range declined {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			if code, ok := early(tc.args, &stdout, &stderr); ok {
				t.Fatalf("taken (exit %d), want it left to the full command line", code)
			}
			if stdout.Len() != 0 || stderr.Len() != 0 {
				t.Errorf("wrote %q and %q while declining", stdout.String(), stderr.String())
			}
		})
	}

	t.Run("runs", func(t *testing.T) {
		var stdout, stderr strings.Builder
		code, ok := early([]string{"run", "--code-file", file, "--timeout=5s", "--max-output", "100"}, &stdout, &stderr)
		if !ok || code != 0 {
			t.Fatalf("ok=%v exit %d, stderr %q", ok, code, stderr.String())
		}
		var res exec.Result
		if err := json.Unmarshal([]byte(stdout.String()), &res); err != nil {
			t.Fatalf("stdout is not a result: %v\n%s", err, stdout.String())
		}
		if res.Stdout != "42\n" || res.ExitCode != 0 || !strings.HasPrefix(res.SandboxID, "local-") {
			t.Errorf("result = %+v", res)
		}
	})

	t.Run("missing file", func(t *testing.T) {
		var stdout, stderr strings.Builder
		code, ok := early([]string{"run", "--code-file", filepath.Join(t.TempDir(), "nope.py")}, &stdout, &stderr)
		if !ok || code != 1 || stdout.Len() != 0 || !strings.HasPrefix(stderr.String(), "sandbox: read code: ") {
			t.Errorf("ok=%v exit %d, stdout %q, stderr %q", ok, code, stdout.String(), stderr.String())
		}
	})
}
