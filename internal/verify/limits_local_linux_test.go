package verify

import (
	"net/http/httptest"
	"os/exec"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/local"
	"github.com/sandboxd/sandbox/internal/server"
)

// TestLimitChecksOnLocalBackend runs the runner/... checks, snippets and
// all, against the real HTTP server with the local backend: the same code
// (exec.Run) the pods' runner uses, without a cluster.
func TestLimitChecksOnLocalBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real snippets for about 20 s")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not on PATH")
	}
	ctx := t.Context()
	b, err := local.New(ctx, local.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	srv, err := server.New(server.Options{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	e := &env{opts: Options{}, sb: newHTTPSandbox(hs.URL, ""), start: time.Now(), target: map[string]string{}}
	setDefaults(&e.opts)

	var rs []Result
	for _, f := range []func() []Result{
		func() []Result { return checkTimeout(ctx, e) },
		func() []Result { return checkFlood(ctx, e) },
		func() []Result { return checkMemoryBomb(ctx, e) },
		func() []Result { return checkForkBomb(ctx, e) },
		func() []Result { return checkPaths(ctx, e) },
	} {
		rs = append(rs, f()...)
	}
	for _, r := range rs {
		t.Logf("%-12s %-32s %s", r.Status, r.Name, clip(r.Evidence, 400))
		// Measured on the serve pod, and the pod's pids limit: neither
		// exists here.
		if r.Status != Pass && r.Name != "runner/flood-service-memory" && r.Name != "runner/process-limit" {
			t.Errorf("%s: %s", r.Name, r.Status)
		}
	}
}
