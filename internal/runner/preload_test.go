//go:build linux

package runner

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a log destination the runner's goroutines may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPreloadReported: a module the image lacks does not stop the runner:
// /healthz and the log name it once the rest is imported, and the job
// finds the rest imported.
func TestPreloadReported(t *testing.T) {
	var logs syncBuffer
	opts := Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
	opts.Exec.Preload = []string{"json", "no_such_module_sandbox"}
	_, url, _ := startWith(t, opts)
	waitReady(t, url)
	var body string
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(body, `"preload":"done"`); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("healthz never said the preload was done: %s", body)
		}
		_, body = do(t, "GET", url+"/healthz", "")
	}
	if !strings.Contains(body, `"preload_missing":["no_such_module_sandbox"]`) {
		t.Errorf("healthz = %s, want the missing module named", body)
	}
	if l := logs.String(); !strings.Contains(l, `"missing":["no_such_module_sandbox"]`) {
		t.Errorf("log lacks the missing module:\n%s", l)
	}
	code, res := do(t, "POST", url+"/v1/execute", `{"code": "import sys; print('json' in sys.modules)"}`)
	if code != 200 || !strings.Contains(res, `"stdout":"True\n"`) {
		t.Errorf("job = %d %s, want json already imported", code, res)
	}
}
