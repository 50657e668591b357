//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/klient/wait/conditions"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/sandboxd/sandbox/e2e/kindenv"
	"github.com/sandboxd/sandbox/wire"
)

// execute posts one snippet to the service at base, retrying while the
// service says it has no capacity (a warm pool refilling), until ctx ends.
func execute(ctx context.Context, t *testing.T, base, code string, timeoutS int) wire.Result {
	t.Helper()
	return executeRequest(ctx, t, base, wire.ExecuteRequest{Code: code, TimeoutS: &timeoutS})
}

// executeRequest is execute for a whole request (files, outputs); its
// TimeoutS must be set.
func executeRequest(ctx context.Context, t *testing.T, base string, req wire.ExecuteRequest) wire.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Duration(*req.TimeoutS)*time.Second+90*time.Second)
	defer cancel()
	for {
		r, err := postRequest(ctx, base, req)
		if err != nil {
			t.Fatal(err)
		}
		if r.status() == http.StatusServiceUnavailable {
			wait := max(r.err.RetryAfter, 2*time.Second)
			t.Logf("service busy (%s), retrying in %s", r.errorMsg(), wait)
			select {
			case <-ctx.Done():
				t.Fatalf("service stayed unavailable: %v", ctx.Err())
			case <-time.After(wait):
			}
			continue
		}
		if r.err != nil {
			t.Fatalf("POST /v1/execute: %s", r)
		}
		return r.res
	}
}

type svcKey struct{}

func withService(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
	return context.WithValue(ctx, svcKey{}, forwardToService(ctx, t, cfg))
}

func service(ctx context.Context) string { return ctx.Value(svcKey{}).(string) }

func TestExecute(t *testing.T) {
	f := features.New("an execution returns its print output").
		Setup(withService).
		Assess("print output comes back", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			res := execute(ctx, t, service(ctx), `print("hello from e2e", 6 * 7)`, 20)
			if res.ExitCode != 0 || res.TimedOut {
				t.Fatalf("exit %d, timed out %v, stderr %q", res.ExitCode, res.TimedOut, res.Stderr)
			}
			if strings.TrimSpace(res.Stdout) != "hello from e2e 42" {
				t.Fatalf("stdout %q, want %q", res.Stdout, "hello from e2e 42")
			}
			if res.SandboxID == "" {
				t.Fatal("empty sandbox_id")
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// hostnameCode prints the pod's name (a pod's hostname is its name), so the
// test can tie sandbox_id to the pod that really ran the snippet.
const hostnameCode = "import socket; print(socket.gethostname())"

func TestNoReuse(t *testing.T) {
	f := features.New("two executions get different sandboxes and the first pod is gone").
		Setup(withService).
		Assess("different sandbox_ids, first pod deleted", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			first := execute(ctx, t, service(ctx), hostnameCode, 20)
			second := execute(ctx, t, service(ctx), hostnameCode, 20)
			for i, r := range []wire.Result{first, second} {
				if r.ExitCode != 0 || r.SandboxID == "" {
					t.Fatalf("run %d: exit %d, sandbox_id %q, stderr %q", i+1, r.ExitCode, r.SandboxID, r.Stderr)
				}
				if got := strings.TrimSpace(r.Stdout); got != r.SandboxID {
					t.Fatalf("run %d ran in pod %q but reports sandbox_id %q", i+1, got, r.SandboxID)
				}
			}
			if first.SandboxID == second.SandboxID {
				t.Fatalf("both runs had sandbox_id %q", first.SandboxID)
			}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: first.SandboxID, Namespace: kindenv.Namespace}}
			if err := wait.For(conditions.New(cfg.Client().Resources()).ResourceDeleted(pod),
				wait.WithContext(ctx), wait.WithTimeout(time.Minute), wait.WithInterval(time.Second)); err != nil {
				t.Fatalf("first pod %s not deleted: %v", first.SandboxID, err)
			}
			t.Logf("runs in %s then %s; %s is gone", first.SandboxID, second.SandboxID, first.SandboxID)
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

func TestTimeout(t *testing.T) {
	f := features.New("a timeout kills the run").
		Setup(withService).
		Assess("while True runs into its 2 s timeout", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			start := time.Now()
			res := execute(ctx, t, service(ctx), "print('started', flush=True)\nwhile True:\n    pass", 2)
			took := time.Since(start)
			if res.ExitCode != -1 || !res.TimedOut {
				t.Fatalf("exit %d, timed_out %v; want -1, true (stdout %q, stderr %q)", res.ExitCode, res.TimedOut, res.Stdout, res.Stderr)
			}
			if !strings.Contains(res.Stdout, "started") {
				t.Fatalf("the snippet never ran: stdout %q", res.Stdout)
			}
			t.Logf("timed out as asked; request took %s, duration_ms %d", took.Round(time.Millisecond), res.DurationMS)
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
