package pool

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/wire"
)

// streamingRunner answers as a runner asked for events does: a line, a
// pause, another line, the result.
func streamingRunner(pause time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !api.WantsEventStream(r.Header) {
			http.Error(w, `{"error":"the pool did not ask for events"}`, http.StatusBadRequest)
			return
		}
		s := api.NewEventStream(w, api.ServerTiming)
		s.Output(wire.EventStdout, "one\n")
		time.Sleep(pause)
		s.Output(wire.EventStdout, "two\n")
		s.Stop()
		w.Header().Set(api.ServerTiming, "runner_job;dur=5")
		s.Finish(wire.Result{Process: wire.Process{Stdout: "one\ntwo\n", ExitCode: 0, DurationMS: 7}})
	}
}

// TestExecuteRelaysTheRunnersStream: a job with an Output gets the
// runner's events as they come, its result as the runner gave it (the
// pod's name for the id), and the runner's timing from its trailer.
func TestExecuteRelaysTheRunnersStream(t *testing.T) {
	e := newEnv(t, nil).start()
	e.waitWarm(3)
	const pause = 500 * time.Millisecond
	e.setRunner(streamingRunner(pause))
	var (
		mu    sync.Mutex
		first time.Time
		out   strings.Builder
	)
	ctx, timing := api.WithTiming(t.Context())
	res, err := e.pool.Execute(ctx, exec.Job{Code: "x", Timeout: 5 * time.Second, Output: func(stream, text string) {
		mu.Lock()
		defer mu.Unlock()
		if first.IsZero() {
			first = time.Now()
		}
		out.WriteString(text)
	}})
	ended := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if first.IsZero() || ended.Sub(first) < pause*8/10 {
		t.Errorf("first output %s before the result, want about %s", ended.Sub(first), pause)
	}
	if res.Stdout != "one\ntwo\n" || out.String() != res.Stdout || !strings.HasPrefix(res.SandboxID, "sandbox-") {
		t.Errorf("result %+v, relayed %q", res, out.String())
	}
	if !strings.Contains(timing.Header(), api.TimingRunnerJob+";dur=5") {
		t.Errorf("timing %q: want the runner's from its trailer", timing.Header())
	}
}
