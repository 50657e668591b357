package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/auth"
	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/internal/policy"
	"github.com/sandboxd/sandbox/wire"
)

// tokens is an authenticator that knows a fixed set of tokens.
type tokens map[string]auth.Identity

func (t tokens) Authenticate(_ context.Context, r *http.Request) (auth.Identity, error) {
	id, ok := t[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
	if !ok {
		return auth.Identity{}, api.Errorf(http.StatusUnauthorized, "no token")
	}
	return id, nil
}

var (
	granted  = auth.Identity{User: "system:serviceaccount:agents:bot", Groups: []string{"system:serviceaccounts:agents"}}
	snippets = auth.Identity{User: "system:serviceaccount:lab:x", Groups: []string{"system:serviceaccounts:lab"}}
	stranger = auth.Identity{User: "system:serviceaccount:else:y", Groups: []string{"system:serviceaccounts:else"}}
)

func newFrontServer(t *testing.T, fb *fakeBackend, fc *fakeCaller) (*Server, *syncBuffer) {
	t.Helper()
	deployed := api.CallPolicy{Images: []string{"agent:dev", "agent:other"}, ImagesSetting: "--tool-images"}
	p, err := policy.Parse([]byte(`
callers:
- subject: system:serviceaccount:agents:bot
  snippets: true
  toolImages: [agent:dev=none]
  maxInFlight: 1
  maxTimeoutS: 30
- subject: system:serviceaccounts:lab
  snippets: true
`), deployed)
	if err != nil {
		t.Fatal(err)
	}
	g := policy.NewGate()
	g.Set(p)
	var logs syncBuffer
	s, err := New(Options{Backend: fb, Caller: fc, CallPolicy: deployed, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		Auth: tokens{"bot": granted, "lab": snippets, "else": stranger}, Gate: g})
	if err != nil {
		t.Fatal(err)
	}
	return s, &logs
}

// TestFrontDoor: each request is judged by who sends it before its body
// is read, its grant once it is, and every answer names its request id,
// which the audit line carries with the caller.
func TestFrontDoor(t *testing.T) {
	fb := &fakeBackend{ready: true}
	fc := &fakeCaller{}
	s, logs := newFrontServer(t, fb, fc)
	for _, c := range []struct {
		name, token, path, body string
		status                  int
		want                    string
	}{
		{"no token", "", "/v1/execute", `{"code":"print(1)"}`, 401, "no token"},
		{"a caller the policy does not name", "else", "/v1/execute", `{"code":"print(1)"}`, 403, stranger.User},
		{"granted", "bot", "/v1/execute", `{"code":"print(1)"}`, 200, ""},
		{"a timeout over the grant", "bot", "/v1/execute", `{"code":"print(1)","timeout_s":31}`, 400, "timeout_s of 30 at most"},
		{"snippets only, calling a tool", "lab", "/v1/call", `{"image":"agent:dev","function":"m:f"}`, 403, "may not call tools"},
		{"an image not granted", "bot", "/v1/call", `{"image":"agent:other","function":"m:f"}`, 403, `may not call the tool image "agent:other"`},
		{"an image granted", "bot", "/v1/call", `{"image":"agent:dev","function":"m:f"}`, 200, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			logs.Reset()
			jobs, calls := fb.calls(), len(fc.calls)
			req := httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body))
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, req)
			if rec.Code != c.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, c.status, rec.Body)
			}
			if c.status != 200 {
				if msg := errorOf(t, rec); !strings.Contains(msg, c.want) {
					t.Errorf("error %q, want it to say %q", msg, c.want)
				}
				if fb.calls() != jobs || len(fc.calls) != calls {
					t.Error("a refused request reached the backend")
				}
			}
			id := rec.Header().Get(RequestIDHeader)
			if c.status == 200 && c.path == "/v1/call" {
				// The call carries its request id and the caller's egress.
				if got := fc.calls[len(fc.calls)-1]; got.RequestID != id || got.Egress != "none" {
					t.Errorf("the caller got request id %q, egress %q; want %q, none", got.RequestID, got.Egress, id)
				}
			}
			var line map[string]any
			if err := json.Unmarshal([]byte(logs.String()), &line); err != nil {
				t.Fatalf("want one JSON audit line, got %q", logs)
			}
			if id == "" || line["id"] != id || line["status"] != float64(c.status) || line["path"] != c.path {
				t.Errorf("audit line %v, want id %q, status %d, path %s", line, id, c.status, c.path)
			}
			var body struct {
				RequestID string `json:"request_id"`
			}
			if c.status == 200 && (json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.RequestID != id) {
				t.Errorf("answer %s, want request_id %q", rec.Body, id)
			}
			if c.token != "" && c.token != "else" && line["caller"] == "" {
				t.Errorf("audit line without its caller: %v", line)
			}
			if strings.Contains(logs.String(), "print(1)") || strings.Contains(logs.String(), "Bearer") {
				t.Errorf("the audit line holds the code or the token: %s", logs)
			}
		})
	}
	metrics := do(t, s.Handler(), "GET", "/metrics", "").Body.String()
	for _, want := range []string{
		`sandbox_requests_total{decision="admitted",namespace="agents",path="/v1/execute"} 2`,
		`sandbox_requests_total{decision="unauthenticated",namespace="",path="/v1/execute"} 1`,
		`sandbox_requests_total{decision="forbidden",namespace="",path="/v1/execute"} 1`,
		`sandbox_requests_total{decision="forbidden",namespace="",path="/v1/call"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestFrontDoorQuota: a caller at its bound in flight gets a 429 with
// Retry-After while its first request runs, and the next once it ends.
func TestFrontDoorQuota(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	fb := &fakeBackend{ready: true}
	fb.run = func(ctx context.Context, _ exec.Job) (wire.Result, error) {
		close(started)
		<-release
		return wire.Result{}, nil
	}
	s, _ := newFrontServer(t, fb, &fakeCaller{})
	post := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/v1/execute", strings.NewReader(`{"code":"x"}`))
		req.Header.Set("Authorization", "Bearer bot")
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		return rec
	}
	first := make(chan *httptest.ResponseRecorder)
	go func() { first <- post() }()
	<-started
	rec := post()
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Errorf("second in flight: %d %s (Retry-After %q), want 429 with Retry-After", rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}
	close(release)
	if rec := <-first; rec.Code != 200 {
		t.Errorf("first: %d %s", rec.Code, rec.Body)
	}
	fb.run = nil
	if rec := post(); rec.Code != 200 {
		t.Errorf("after the first ended: %d %s", rec.Code, rec.Body)
	}
}
