package pool

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/exec"
)

// TestOverdueUnreachableRunnerIs502: a runner that has not answered after
// the job's timeout and whose pod can no longer be reached at all (its
// node lost mid-run: here, every connection after the job's fails with no
// route to host) is a 502 naming the pod, not the timed-out result the pool
// gives for a runner that is only late: that would be a 200 nobody gave.
func TestOverdueUnreachableRunnerIs502(t *testing.T) {
	const timeout = time.Second
	var lost atomic.Bool
	e := newEnv(t, nil, func(o *Options) {
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if lost.Load() {
				return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.EHOSTUNREACH}
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}
	}).start()
	e.waitWarm(3)
	e.setRunner(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		lost.Store(true) // the node goes with the job on it
		<-r.Context().Done()
	})
	start := time.Now()
	res, err := e.pool.Execute(t.Context(), exec.Job{Code: "x", Timeout: timeout})
	ae, ok := api.AsError(err)
	if !ok || ae.Status != http.StatusBadGateway || !strings.Contains(ae.Msg, "cannot be reached") || !strings.Contains(ae.Msg, "sandbox pod sandbox-") {
		t.Fatalf("res %+v, err %v: want a 502 saying the runner cannot be reached", res, err)
	}
	if took := time.Since(start); took > timeout+answerGrace+reachProbe+time.Second {
		t.Errorf("answered after %s", took)
	}
	t.Log(ae.Msg)
}
