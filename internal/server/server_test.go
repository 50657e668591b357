package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/wire"
)

// fakeBackend answers with a fixed result or error, or with what run says.
type fakeBackend struct {
	mu     sync.Mutex
	jobs   []exec.Job
	result wire.Result
	err    error
	run    func(ctx context.Context, job exec.Job) (wire.Result, error)
	ready  bool

	registered bool
}

func (f *fakeBackend) Execute(ctx context.Context, job exec.Job) (wire.Result, error) {
	f.mu.Lock()
	f.jobs = append(f.jobs, job)
	f.mu.Unlock()
	if f.run != nil {
		return f.run(ctx, job)
	}
	return f.result, f.err
}

func (f *fakeBackend) Ready() bool { return f.ready }

func (f *fakeBackend) RegisterMetrics(reg prometheus.Registerer) error {
	f.registered = true
	return reg.Register(prometheus.NewCounter(prometheus.CounterOpts{Name: "fake_backend_total", Help: "x"}))
}

func (f *fakeBackend) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.jobs)
}

// newTestServer returns a server over b and a buffer receiving its JSON log.
func newTestServer(t *testing.T, b Backend, maxBody int64) (*Server, *syncBuffer) {
	t.Helper()
	var logs syncBuffer
	s, err := New(Options{Backend: b, Logger: slog.New(slog.NewJSONHandler(&logs, nil)), MaxBody: maxBody})
	if err != nil {
		t.Fatal(err)
	}
	return s, &logs
}

func do(t *testing.T, h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
	return rec
}

// errorOf checks that rec is a JSON error body and returns its message.
func errorOf(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var eb wire.ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error == "" {
		t.Fatalf("body %q is not a JSON error: %v", rec.Body, err)
	}
	return eb.Error
}

func TestExecuteOK(t *testing.T) {
	fb := &fakeBackend{result: wire.Result{SandboxID: "sb-1", Process: wire.Process{Stdout: "hi\n", ExitCode: 0, DurationMS: 12}}}
	s, logs := newTestServer(t, fb, 0)
	rec := do(t, s.Handler(), "POST", "/v1/execute", `{"code":"print('SECRET-CODE')","timeout_s":5}`)
	if rec.Code != 200 {
		t.Fatalf("status = %d, body %s", rec.Code, rec.Body)
	}
	var got wire.Result
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := fb.result
	want.RequestID = rec.Header().Get(RequestIDHeader)
	if !reflect.DeepEqual(got, want) || want.RequestID == "" {
		t.Errorf("result = %+v, want %+v", got, want)
	}
	if len(fb.jobs) != 1 || fb.jobs[0].Timeout != 5*time.Second || fb.jobs[0].Code != "print('SECRET-CODE')" {
		t.Errorf("backend got %+v", fb.jobs)
	}
	line := logs.onlyLine(t)
	for k, want := range map[string]any{"msg": "request", "path": "/v1/execute", "outcome": "ok", "sandbox_id": "sb-1", "exit_code": 0.0, "stdout_bytes": 3.0, "stderr_bytes": 0.0, "status": 200.0} {
		if line[k] != want {
			t.Errorf("log %s = %v, want %v", k, line[k], want)
		}
	}
	if _, ok := line["duration_ms"]; !ok {
		t.Error("log line has no duration_ms")
	}
	if strings.Contains(logs.String(), "SECRET-CODE") {
		t.Errorf("the log holds the code: %s", logs)
	}
	if _, ok := api.ParseServerTiming(rec.Header().Get(api.ServerTiming))[api.TimingTotal]; !ok {
		t.Errorf("Server-Timing %q has no %s", rec.Header().Get(api.ServerTiming), api.TimingTotal)
	}
}

func TestExecuteOutcomes(t *testing.T) {
	tests := []struct {
		name    string
		result  wire.Result
		outcome string
	}{
		{"error exit", wire.Result{Process: wire.Process{ExitCode: 1}}, wire.OutcomeErrorExit},
		{"timeout", wire.Result{Process: wire.Process{ExitCode: -1, TimedOut: true}}, wire.OutcomeTimeout},
		{"oom", wire.Result{Process: wire.Process{ExitCode: 137, OOMKilled: true}}, wire.OutcomeOOM},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, logs := newTestServer(t, &fakeBackend{result: tt.result}, 0)
			if rec := do(t, s.Handler(), "POST", "/v1/execute", `{"code":"x"}`); rec.Code != 200 {
				t.Fatalf("status = %d, want 200: a snippet's failure is still a result", rec.Code)
			}
			if got := logs.onlyLine(t)["outcome"]; got != tt.outcome {
				t.Errorf("outcome = %v, want %s", got, tt.outcome)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		backendErr error
		status     int
		msg        string // substring of the error message
		header     [2]string
		reqHeader  [2]string
		outcome    string // "" when the request is refused before its body is read
	}{
		{name: "malformed JSON", method: "POST", path: "/v1/execute", body: `{"code":`,
			status: 400, msg: "malformed JSON", outcome: wire.OutcomeRejected},
		{name: "unknown field", method: "POST", path: "/v1/execute", body: `{"code":"x","lang":"py"}`,
			status: 400, msg: `unknown field "lang"`, outcome: wire.OutcomeRejected},
		{name: "missing code", method: "POST", path: "/v1/execute", body: `{}`,
			status: 400, msg: "missing code", outcome: wire.OutcomeRejected},
		{name: "timeout out of range", method: "POST", path: "/v1/execute", body: `{"code":"x","timeout_s":600}`,
			status: 400, msg: "timeout_s 600 out of range", outcome: wire.OutcomeRejected},
		{name: "bad path", method: "POST", path: "/v1/execute", body: `{"code":"x","files":[{"path":"../x","content":""}]}`,
			status: 400, msg: `files[0]: file path "../x"`, outcome: wire.OutcomeRejected},
		{name: "body too large", method: "POST", path: "/v1/execute", body: `{"code":"` + strings.Repeat("x", 2000) + `"}`,
			status: 413, msg: "limit is 1024 bytes", outcome: wire.OutcomeRejected},
		{name: "wrong method", method: "GET", path: "/v1/execute",
			status: 405, msg: "method GET not allowed", header: [2]string{"Allow", "POST"}},
		{name: "wrong method on health", method: "POST", path: "/healthz",
			status: 405, msg: "use GET, HEAD", header: [2]string{"Allow", "GET, HEAD"}},
		{name: "unknown path", method: "GET", path: "/v1/exec",
			status: 404, msg: `no such path "/v1/exec"`},
		{name: "a web page's request", method: "POST", path: "/v1/execute", body: `{"code":"x"}`, reqHeader: [2]string{"Origin", "http://evil.example"},
			status: 403, msg: "a request from a web page"},
		{name: "a web page's request without Origin", method: "POST", path: "/v1/execute", body: `{"code":"x"}`, reqHeader: [2]string{"Sec-Fetch-Site", "cross-site"},
			status: 403, msg: "a request from a web page"},
		{name: "a compressed body", method: "POST", path: "/v1/execute", body: `{"code":"x"}`, reqHeader: [2]string{"Content-Encoding", "gzip"},
			status: 415, msg: `Content-Encoding "gzip" is not supported`},
		{name: "no capacity", method: "POST", path: "/v1/execute", body: `{"code":"x"}`, backendErr: api.ErrNoCapacity,
			status: 503, msg: "no warm sandbox pod available", header: [2]string{"Retry-After", "5"}, outcome: wire.OutcomeRejected},
		{name: "backend bad request", method: "POST", path: "/v1/execute", body: `{"code":"x"}`,
			backendErr: fmt.Errorf("write files: %w", api.Errorf(400, "files[0]: a symlink escapes")),
			status:     400, msg: "a symlink escapes", outcome: wire.OutcomeRejected},
		{name: "backend error without a status", method: "POST", path: "/v1/execute", body: `{"code":"x"}`, backendErr: &api.Error{Msg: "oops"},
			status: 500, msg: "execution failed: oops", outcome: wire.OutcomeFailed},
		{name: "backend failure", method: "POST", path: "/v1/execute", body: `{"code":"x"}`, backendErr: errors.New("create pod: quota exceeded"),
			status: 500, msg: "execution failed: create pod: quota exceeded", outcome: wire.OutcomeFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb := &fakeBackend{err: tt.backendErr}
			s, logs := newTestServer(t, fb, 1024)
			req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
			if tt.reqHeader[0] != "" {
				req.Header.Set(tt.reqHeader[0], tt.reqHeader[1])
			}
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, req)
			if rec.Code != tt.status {
				t.Errorf("status = %d, want %d (body %s)", rec.Code, tt.status, rec.Body)
			}
			if msg := errorOf(t, rec); !strings.Contains(msg, tt.msg) {
				t.Errorf("error %q does not contain %q", msg, tt.msg)
			}
			if tt.header[0] != "" && rec.Header().Get(tt.header[0]) != tt.header[1] {
				t.Errorf("%s = %q, want %q", tt.header[0], rec.Header().Get(tt.header[0]), tt.header[1])
			}
			if tt.backendErr == nil && fb.calls() != 0 {
				t.Errorf("the backend ran a rejected request")
			}
			if tt.outcome == "" {
				// Refused before the body was read: one line of its own.
				var line map[string]any
				if err := json.Unmarshal([]byte(logs.String()), &line); err != nil || strings.Count(logs.String(), "\n") != 1 ||
					line["msg"] != "request" || line["outcome"] != nil || line["status"] != float64(tt.status) || line["path"] != tt.path {
					t.Errorf("log = %s, want one line of the refusal", logs)
				}
				return
			}
			line := logs.onlyLine(t)
			if line["outcome"] != tt.outcome || line["status"] != float64(tt.status) || line["error"] == nil {
				t.Errorf("log line = %v, want outcome %s, status %d and the error", line, tt.outcome, tt.status)
			}
		})
	}
}

// TestBodyTooLargeUndeclared: a chunked body (no Content-Length) over the
// limit is cut off while it is read.
func TestBodyTooLargeUndeclared(t *testing.T) {
	fb := &fakeBackend{}
	s, _ := newTestServer(t, fb, 1024)
	req := httptest.NewRequest("POST", "/v1/execute", io.MultiReader(strings.NewReader(`{"code":"`), strings.NewReader(strings.Repeat("x", 4096)), strings.NewReader(`"}`)))
	req.ContentLength = -1
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != 413 || !strings.Contains(errorOf(t, rec), "limit is 1024 bytes") || fb.calls() != 0 {
		t.Errorf("status %d body %s", rec.Code, rec.Body)
	}
}

func TestBackendPanic(t *testing.T) {
	fb := &fakeBackend{run: func(context.Context, exec.Job) (wire.Result, error) { panic("boom") }}
	s, logs := newTestServer(t, fb, 0)
	rec := do(t, s.Handler(), "POST", "/v1/execute", `{"code":"x"}`)
	if rec.Code != 500 || !strings.Contains(errorOf(t, rec), "boom") {
		t.Errorf("status %d body %s, want 500 naming the panic", rec.Code, rec.Body)
	}
	if got := logs.onlyLine(t)["outcome"]; got != wire.OutcomeFailed {
		t.Errorf("outcome = %v", got)
	}
}

func TestHealthAndReady(t *testing.T) {
	fb := &fakeBackend{ready: false}
	s, _ := newTestServer(t, fb, 0)
	if rec := do(t, s.Handler(), "GET", "/healthz", ""); rec.Code != 200 {
		t.Errorf("/healthz = %d", rec.Code)
	}
	if rec := do(t, s.Handler(), "GET", "/readyz", ""); rec.Code != 503 || !strings.Contains(errorOf(t, rec), "not ready") {
		t.Errorf("/readyz with an unready backend = %d %s, want 503", rec.Code, rec.Body)
	}
	fb.ready = true
	if rec := do(t, s.Handler(), "GET", "/readyz", ""); rec.Code != 200 {
		t.Errorf("/readyz = %d", rec.Code)
	}
	if rec := do(t, s.Handler(), "HEAD", "/readyz", ""); rec.Code != 200 {
		t.Errorf("HEAD /readyz = %d", rec.Code)
	}
}

func TestMetrics(t *testing.T) {
	fb := &fakeBackend{result: wire.Result{Usage: wire.Usage{CPUMS: 300, MaxRSSKiB: 20 << 10}, Process: wire.Process{ExitCode: 0}}}
	s, _ := newTestServer(t, fb, 0)
	if !fb.registered {
		t.Error("New did not let the backend register its metrics")
	}
	h := s.Handler()
	do(t, h, "POST", "/v1/execute", `{"code":"x"}`)
	do(t, h, "POST", "/v1/execute", `{"code":"x"}`)
	do(t, h, "POST", "/v1/execute", `{}`)
	rec := do(t, h, "GET", "/metrics", "")
	if rec.Code != 200 {
		t.Fatalf("/metrics = %d", rec.Code)
	}
	body := rec.Body.String()
	for _, want := range []string{
		`sandbox_executions_total{outcome="ok"} 2`,
		`sandbox_executions_total{outcome="rejected"} 1`,
		`sandbox_executions_total{outcome="timeout"} 0`,
		`sandbox_execution_duration_seconds_count 2`,
		`sandbox_execution_cpu_seconds_bucket{le="0.25"} 0`,
		`sandbox_execution_cpu_seconds_bucket{le="0.5"} 2`,
		`sandbox_execution_max_rss_bytes_bucket{le="1.6777216e+07"} 0`,
		`sandbox_execution_max_rss_bytes_bucket{le="3.3554432e+07"} 2`,
		`sandbox_executions_in_flight 0`,
		`fake_backend_total 0`,
		`process_resident_memory_bytes `,
		`go_goroutines `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestInFlightGauge(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	fb := &fakeBackend{run: func(ctx context.Context, job exec.Job) (wire.Result, error) {
		close(started)
		<-release
		return wire.Result{}, nil
	}}
	s, _ := newTestServer(t, fb, 0)
	done := make(chan struct{})
	go func() {
		defer close(done)
		do(t, s.Handler(), "POST", "/v1/execute", `{"code":"x"}`)
	}()
	<-started
	if body := do(t, s.Handler(), "GET", "/metrics", "").Body.String(); !strings.Contains(body, "sandbox_executions_in_flight 1") {
		t.Errorf("in-flight gauge is not 1 during a run")
	}
	close(release)
	<-done
}

func TestNewRejectsBadOptions(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("New without a backend succeeded")
	}
	if _, err := New(Options{Backend: &fakeBackend{}, MaxBody: -1}); err == nil {
		t.Error("New with a negative body limit succeeded")
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
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

// Reset forgets what was written.
func (s *syncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

func (s *syncBuffer) Len() int { return len(s.String()) }

// executions returns the JSON log lines of requests to /v1/execute.
func (s *syncBuffer) executions(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := json.NewDecoder(strings.NewReader(s.String()))
	for {
		var m map[string]any
		if err := dec.Decode(&m); err == io.EOF {
			return out
		} else if err != nil {
			t.Fatalf("log is not JSON lines: %v\n%s", err, s)
		}
		if m["msg"] == "request" && m["path"] == "/v1/execute" {
			out = append(out, m)
		}
	}
}

func (s *syncBuffer) onlyLine(t *testing.T) map[string]any {
	t.Helper()
	lines := s.executions(t)
	if len(lines) != 1 {
		t.Fatalf("got %d execution log lines, want 1:\n%s", len(lines), s)
	}
	return lines[0]
}

// TestBrowsersMayRead: a browser may still GET the health and metrics
// pages (an operator's), and a program's POST, with no browser headers or
// Sec-Fetch-Site "none" (typed by the user), runs: the positive control of
// the web-page refusal.
func TestBrowsersMayRead(t *testing.T) {
	fb := &fakeBackend{ready: true}
	s, _ := newTestServer(t, fb, 1024)
	for _, tt := range []struct {
		method, path, name, value string
		status                    int
	}{
		{"GET", "/healthz", "Origin", "http://evil.example", 200},
		{"GET", "/metrics", "Sec-Fetch-Site", "cross-site", 200},
		{"POST", "/v1/execute", "Sec-Fetch-Site", "none", 200},
		{"POST", "/v1/execute", "", "", 200},
		{"POST", "/v1/execute", "Content-Encoding", "identity", 200},
	} {
		req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(`{"code":"x"}`))
		if tt.name != "" {
			req.Header.Set(tt.name, tt.value)
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		if rec.Code != tt.status {
			t.Errorf("%s %s with %s %q: %d %s, want %d", tt.method, tt.path, tt.name, tt.value, rec.Code, rec.Body, tt.status)
		}
	}
	if fb.calls() != 3 {
		t.Errorf("%d runs, want the three program POSTs", fb.calls())
	}
}
