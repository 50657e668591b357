package oneshot_test

import (
	"bufio"
	"encoding/json"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/exec"
)

// heavy are packages of the sandbox binary with costly init functions that
// `run --code-file` never uses.
var heavy = []string{
	"k8s.io/client-go/kubernetes/scheme",
	"k8s.io/api/core/v1",
	"github.com/prometheus/client_golang/prometheus",
	"github.com/sandboxd/sandbox/verify",
}

// TestEarlyExitSkipsHeavyInit runs the real binary with GODEBUG=inittrace=1,
// which prints a line as each package's init finishes. `sandbox version`
// must show the heavy packages and this one (so the check can see them);
// `sandbox run --code-file` must print its result having initialised none
// of them, and ended inside this package's init.
func TestEarlyExitSkipsHeavyInit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the sandbox binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "sandbox")
	build := osexec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "github.com/sandboxd/sandbox")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	file := filepath.Join(dir, "snippet.py")
	if err := os.WriteFile(file, []byte("print('early')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const self = "github.com/sandboxd/sandbox/modes/oneshot"

	_, inits := traceInits(t, bin, "version")
	for _, pkg := range append(heavy, self) {
		if !inits[pkg] {
			t.Fatalf("`sandbox version` did not initialise %s: the trace cannot show what this test looks for", pkg)
		}
	}

	stdout, inits := traceInits(t, bin, "run", "--code-file", file)
	var res exec.Result
	if err := json.Unmarshal(stdout, &res); err != nil || res.Stdout != "early\n" {
		t.Fatalf("run --code-file: result %+v (%v) from %q", res, err, stdout)
	}
	for _, pkg := range append(heavy, self) {
		if inits[pkg] {
			t.Errorf("run --code-file initialised %s before it ran", pkg)
		}
	}
}

// traceInits runs bin with args and returns its stdout and the packages whose
// init finished.
func traceInits(t *testing.T, bin string, args ...string) ([]byte, map[string]bool) {
	t.Helper()
	cmd := osexec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, stderr.String())
	}
	inits := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(stderr.String()))
	for sc.Scan() {
		// init k8s.io/api/core/v1 @5.9 ms, 0.12 ms clock, 99976 bytes, 553 allocs
		if f := strings.Fields(sc.Text()); len(f) > 2 && f[0] == "init" {
			inits[f[1]] = true
		}
	}
	return stdout, inits
}
