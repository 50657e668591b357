package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sbexec "github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/wire"
)

// TestOutputsThroughTheBackend: a sandboxed run's output files come back
// through the backend, and a symlink it plants to a file of the host that
// only root may read is listed, not followed (exec's TestSandboxOutputs
// shows, as its control, that a path-based reader would have read it).
func TestOutputsThroughTheBackend(t *testing.T) {
	b := newBackend(t, Options{})
	requireSandbox(t, b)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("host-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	code := fmt.Sprintf("import os\nopen('r.csv', 'w').write('a\\n1\\n')\nos.symlink(%q, 'leak.csv')\n", secret)
	res, err := b.Execute(context.Background(), sbexec.Job{Code: code, Timeout: 10 * time.Second, Outputs: []string{"*.csv"}})
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%+v", res.Files)
	if strings.Contains(got, "host-secret") {
		t.Fatalf("the secret came back: %s", got)
	}
	want := []wire.OutputFile{
		{Path: "leak.csv", Skipped: "symlink"},
		{Path: "r.csv", Size: 4, Content: "a\n1\n", Encoding: wire.EncodingUTF8},
	}
	if fmt.Sprint(res.Files) != fmt.Sprint(want) || res.FilesIncomplete {
		t.Errorf("files %s (incomplete %v), want %+v", got, res.FilesIncomplete, want)
	}
	if res.Usage.CPUMS <= 0 || res.Usage.MaxRSSKiB <= 0 {
		t.Errorf("usage %+v", res.Usage)
	}
}
