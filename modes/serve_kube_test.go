package modes

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeAPIServer answers just enough of the Kubernetes API for the pool to
// start: empty pod lists, and watches that send nothing (with the bookmark
// that ends a watch-list's initial events). It writes a kubeconfig for it and
// returns the file's path.
func fakeAPIServer(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		q := r.URL.Query()
		switch {
		case r.Method == http.MethodGet && q.Get("watch") == "true":
			if q.Get("sendInitialEvents") == "true" {
				fmt.Fprint(w, `{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"1","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n")
			}
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		case r.Method == http.MethodGet:
			fmt.Fprint(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`)
		default:
			// Creates and deletes: refused, which the pool logs and retries.
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`)
		}
	}))
	t.Cleanup(srv.Close)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
contexts: [{name: fake, context: {cluster: fake, user: fake}}]
users: [{name: fake, user: {}}]
current-context: fake
`, srv.URL)
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// syncBuffer is a bytes.Buffer safe to write from serve's goroutines while
// the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestServeKubeLogger checks that the pool logs through serve's logger, so
// that --log-format and --log-level apply to its lines too.
func TestServeKubeLogger(t *testing.T) {
	c := parse(t, "serve", "--backend", "kubernetes", "--listen", "127.0.0.1:0",
		"--kubeconfig", fakeAPIServer(t), "--namespace", "sandbox", "--log-format", "text").Serve
	ctx, cancel := context.WithCancel(context.Background())
	var logs syncBuffer
	done := make(chan error, 1)
	go func() { done <- c.Run(&Deps{Ctx: ctx, Stdout: new(bytes.Buffer), Stderr: &logs}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()

	// The pool says this once its informer has synced.
	const line = "pool watching pods"
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), line) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in 10 s; logs:\n%s", line, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if !strings.HasPrefix(l, "time=") {
			t.Errorf("a log line not in --log-format text: %s", l)
		}
	}
}
