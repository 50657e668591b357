package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/wire"
)

// streamed posts a snippet asking for events.
func streamed(t *testing.T, h http.Handler, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest("POST", "/v1/execute", strings.NewReader(body))
	req.Header.Set("Accept", "text/event-stream")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestStreamedAnswers: a streamed request gets events once its run has
// written something, a plain answer for what is refused before, and an
// error event for an error after; each has the one audit line, which says
// it was streamed.
func TestStreamedAnswers(t *testing.T) {
	printsThen := func(res wire.Result, err error) func(context.Context, exec.Job) (wire.Result, error) {
		return func(ctx context.Context, job exec.Job) (wire.Result, error) {
			job.Output(wire.EventStdout, "out\n")
			time.Sleep(3 * api.StreamInterval) // the event goes before the end
			return res, err
		}
	}
	for _, tt := range []struct {
		name       string
		run        func(context.Context, exec.Job) (wire.Result, error)
		body       string
		wantStatus int
		wantBody   []string // in order
		wantLog    map[string]any
	}{
		{name: "events then the result",
			run:        printsThen(wire.Result{SandboxID: "sb-1", Process: wire.Process{Stdout: "out\nmore\n"}}, nil),
			wantStatus: 200,
			wantBody:   []string{"event: stdout\ndata: \"out\\n\"\n\n", "event: stdout\ndata: \"more\\n\"\n\n", "event: result\ndata: {\"sandbox_id\":\"sb-1\",\"request_id\":"},
			wantLog:    map[string]any{"status": float64(200), "outcome": "ok", "streamed": true, "sandbox_id": "sb-1"}},
		{name: "an error after the first event",
			run:        printsThen(wire.Result{}, &api.Error{Status: 502, Msg: "sandbox pod p died during the run: Evicted"}),
			wantStatus: 200,
			wantBody:   []string{"event: stdout\n", "event: error\ndata: {\"error\":\"sandbox pod p died during the run: Evicted\",\"status\":502}\n\n"},
			wantLog:    map[string]any{"status": float64(200), "outcome": "failed", "streamed": true, "error": "sandbox pod p died during the run: Evicted"}},
		{name: "no capacity before anything ran",
			run:        func(context.Context, exec.Job) (wire.Result, error) { return wire.Result{}, api.ErrNoCapacity },
			wantStatus: 503,
			wantBody:   []string{`{"error":"no warm sandbox pod available, try again shortly"}`},
			wantLog:    map[string]any{"status": float64(503), "outcome": "rejected", "streamed": true}},
		{name: "a bad request", body: `{"code":"x","timeout_s":99}`, wantStatus: 400,
			wantBody: []string{`{"error":"timeout_s 99 out of range`},
			wantLog:  map[string]any{"status": float64(400), "outcome": "rejected"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, logs := newTestServer(t, &fakeBackend{run: tt.run}, 0)
			body := tt.body
			if body == "" {
				body = `{"code":"print('out')"}`
			}
			rec := streamed(t, s.Handler(), body)
			got := rec.Body.String()
			if rec.Code != tt.wantStatus {
				t.Fatalf("status %d, body %q", rec.Code, got)
			}
			at := 0
			for _, w := range tt.wantBody {
				i := strings.Index(got[at:], w)
				if i < 0 {
					t.Fatalf("body %q: no %q after byte %d", got, w, at)
				}
				at += i + len(w)
			}
			line := logs.onlyLine(t)
			for k, v := range tt.wantLog {
				if line[k] != v {
					t.Errorf("log %s = %v, want %v (%v)", k, line[k], v, line)
				}
			}
		})
	}
}
