package pool

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/exec"
)

// TestAPIAwayAnswersAtOnce: with the API server not answering, the warm
// pods are still handed out; once they are gone, a request is answered at
// once with a 503 that says why, not after the pool wait; when the API
// server answers again, pods come back. The control: an API server that
// answers with a refusal is there, and a request waits the pool wait for
// the documented 503 as before.
func TestAPIAwayAnswersAtOnce(t *testing.T) {
	const wait = 8 * time.Second
	for _, tt := range []struct {
		name  string
		err   error
		quick bool
	}{
		{"unanswered", errors.New("dial tcp 10.96.0.1:443: connect: connection refused"), true},
		{"refused (control)", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "x", errors.New("quota")), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil, func(o *Options) { o.Wait = wait }).start()
			e.waitWarm(3)
			var failing atomic.Bool
			failing.Store(true)
			e.cs.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				if failing.Load() {
					return true, nil, tt.err
				}
				return false, nil, nil
			})
			for range 3 {
				if _, err := e.pool.Execute(context.Background(), exec.Job{Code: "x", Timeout: 5 * time.Second}); err != nil {
					t.Fatalf("a warm pod while creates fail: %v", err)
				}
			}
			start := time.Now()
			_, err := e.pool.Execute(context.Background(), exec.Job{Code: "x", Timeout: 5 * time.Second})
			took := time.Since(start)
			ae, _ := api.AsError(err)
			switch {
			case tt.quick && (ae == nil || ae.Status != 503 || !strings.Contains(ae.Msg, "API server has not answered") || took > wait/2):
				t.Fatalf("with the API server away: %v after %s; want at once a 503 saying why", err, took)
			case !tt.quick && (!errors.Is(err, api.ErrNoCapacity) || took < wait):
				t.Fatalf("with the API server refusing: %v after %s; want the documented 503 after the %s wait", err, took, wait)
			}
			t.Logf("%s: %v after %s", tt.name, err, took.Round(time.Millisecond))
			if tt.quick {
				// The pool's create retries (with backoff) bring pods back;
				// a caller tries again after the 503's Retry-After.
				failing.Store(false)
				back := time.Now()
				for {
					_, err := e.pool.Execute(context.Background(), exec.Job{Code: "x", Timeout: 5 * time.Second})
					if err == nil {
						break
					}
					if time.Since(back) > 2*maxBackoff {
						t.Fatalf("once the API server answers again: %v", err)
					}
					time.Sleep(100 * time.Millisecond)
				}
				t.Logf("a pod again %s after the API server came back", time.Since(back).Round(time.Millisecond))
			}
		})
	}
}
