package modes_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/internal/modes"
	"github.com/sandboxd/sandbox/wire"
)

func TestRunCodeFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "snippet.py")
	if err := os.WriteFile(file, []byte("import os, sys\nprint(os.getcwd() != '')\nsys.exit(3)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	code := modes.Main([]string{"run", "--code-file", file, "--timeout", "5s", "--max-output", "1000"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q: the snippet's exit code belongs in the JSON", code, stderr.String())
	}
	var res wire.Result
	if err := json.Unmarshal([]byte(stdout.String()), &res); err != nil {
		t.Fatalf("stdout is not a result: %v\n%s", err, stdout.String())
	}
	if res.Stdout != "True\n" || res.ExitCode != 3 || !strings.HasPrefix(res.SandboxID, "local-") {
		t.Errorf("result = %+v", res)
	}
}

func TestRunCodeFileTimeout(t *testing.T) {
	file := filepath.Join(t.TempDir(), "loop.py")
	os.WriteFile(file, []byte("print('a', flush=True)\nwhile True: pass\n"), 0o644)
	var stdout, stderr strings.Builder
	if code := modes.Main([]string{"run", "--code-file", file, "--timeout", "500ms"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	var res wire.Result
	json.Unmarshal([]byte(stdout.String()), &res)
	if !res.TimedOut || res.ExitCode != -1 || res.Stderr != "timed out after 0.5s\n" || res.Stdout != "a\n" {
		t.Errorf("result = %+v", res)
	}
}

// TestRunCodeFileWorkdirAsRoot: an isolated run has no host directory to
// work in, so --workdir as root needs --isolation none.
func TestRunCodeFileWorkdirAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: as another user --code-file is not isolated")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "snippet.py")
	os.WriteFile(file, []byte("import os\nprint(os.getcwd())\n"), 0o644)
	var stdout, stderr strings.Builder
	if code := modes.Main([]string{"run", "--code-file", file, "--workdir", dir}, &stdout, &stderr); code == 0 ||
		!strings.Contains(stderr.String(), "--isolation none") {
		t.Errorf("--workdir without --isolation none: exit %d, stderr %q", code, stderr.String())
	}
	stdout.Reset()
	stderr.Reset()
	if code := modes.Main([]string{"run", "--code-file", file, "--workdir", dir, "--isolation", "none"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	var res wire.Result
	json.Unmarshal([]byte(stdout.String()), &res)
	if res.Stdout != dir+"\n" {
		t.Errorf("result = %+v, want it run in %s", res, dir)
	}
}

func TestRunFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"run", "--code-file", "/nonexistent.py"},
		{"run", "--code-file", "x.py", "--timeout", "0s"},
		{"run", "--code-file", "x.py", "--timeout", "2m"},
		{"run", "--code-file", "x.py", "--weaken", "root-token"}, // a pod's weakening, not the runner's
		{"run", "--code-file", "x.py", "--weaken", "--listen=:8081"},
		{"run", "--code-file", "x.py", "--isolation", "bogus"},
		{"run", "--preload", "numpy,__import__('os').system('id')"},
	} {
		var stdout, stderr strings.Builder
		if code := modes.Main(args, &stdout, &stderr); code == 0 {
			t.Errorf("%v: exit 0, want an error", args)
		}
	}
}

// TestRunSnippetEnv: --snippet-env (SANDBOX_SNIPPET_ENV in the image)
// reaches the snippet beside the runner's own variables, which it may not
// change.
func TestRunSnippetEnv(t *testing.T) {
	file := filepath.Join(t.TempDir(), "env.py")
	os.WriteFile(file, []byte("import os\nprint(os.environ['MPLBACKEND'], os.environ['HOME'] != '')\n"), 0o644)
	var stdout, stderr strings.Builder
	if code := modes.Main([]string{"run", "--code-file", file, "--snippet-env", "MPLBACKEND=Agg,OTHER=1"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	var res wire.Result
	json.Unmarshal([]byte(stdout.String()), &res)
	if res.Stdout != "Agg True\n" {
		t.Errorf("result = %+v", res)
	}
	stdout.Reset()
	stderr.Reset()
	if code := modes.Main([]string{"run", "--code-file", file, "--snippet-env", "HOME=/root"}, &stdout, &stderr); code == 0 ||
		!strings.Contains(stderr.String(), "set by the runner itself") {
		t.Errorf("HOME accepted: exit %d, stderr %q", code, stderr.String())
	}
}
