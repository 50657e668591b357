package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/internal/mcpserver"
	"github.com/sandboxd/sandbox/wire"
)

// bearer sends a token with every request of an HTTP client.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// mcpSession connects the SDK's own client to url's /mcp with token.
func mcpSession(t *testing.T, url, token string) (*mcp.ClientSession, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tr := &mcp.StreamableClientTransport{Endpoint: url + MCPPath, HTTPClient: &http.Client{Transport: bearer{token}}, MaxRetries: -1}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, tr, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

func callRun(cs *mcp.ClientSession, args map[string]any) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.ToolName, Arguments: args})
}

// runLines are the server's audit lines of path that record a run, once
// there are want: a line is written once its answer is, so the client may
// see the answer first.
func runLines(t *testing.T, logs *syncBuffer, path string, want int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var out []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var line map[string]any
			if json.Unmarshal([]byte(l), &line) == nil && line["msg"] == "request" && line["path"] == path && line["outcome"] != nil {
				out = append(out, line)
			}
		}
		if len(out) >= want || time.Now().After(deadline) {
			return out
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMCPFrontDoor: /mcp is behind the same door as /v1/*: no token is
// the same 401, a caller the policy does not name the same 403, both JSON
// naming the problem, and the SDK's client cannot connect.
func TestMCPFrontDoor(t *testing.T) {
	fb := &fakeBackend{ready: true}
	s, _ := newFrontServer(t, fb, &fakeCaller{})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`
	const (
		ctype  = "application/json"
		accept = "application/json, text/event-stream"
	)
	for _, c := range []struct {
		name, method, token, ctype, accept string
		status                             int
		want                               string
	}{
		{"no token", http.MethodPost, "", ctype, accept, 401, "no token"},
		{"a caller the policy does not name", http.MethodPost, "else", ctype, accept, 403, stranger.User},
		{"GET, the SSE stream a stateless server does not offer", http.MethodGet, "bot", ctype, accept, 405, "use POST"},
		{"the SDK's own refusal, made JSON: no event stream accepted", http.MethodPost, "bot", ctype, "application/json", 400, "Accept must contain"},
		{"the SDK's own refusal, made JSON: not JSON", http.MethodPost, "bot", "text/plain", accept, 415, "Content-Type must be"},
		{"granted", http.MethodPost, "bot", ctype, accept, 200, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, ts.URL+MCPPath, strings.NewReader(init))
			req.Header.Set("Content-Type", c.ctype)
			req.Header.Set("Accept", c.accept)
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, body)
			}
			var eb wire.ErrorBody
			if c.status != 200 && (json.Unmarshal(body, &eb) != nil || !strings.Contains(eb.Error, c.want)) {
				t.Errorf("body %s, want a JSON error saying %q", body, c.want)
			}
			if c.status == 200 && !strings.Contains(string(body), `"serverInfo"`) {
				t.Errorf("body %s, want the initialize result", body)
			}
			if resp.Header.Get(RequestIDHeader) == "" {
				t.Error("no request id")
			}
		})
	}
	if _, err := mcpSession(t, ts.URL, ""); err == nil {
		t.Error("the SDK's client connected without a token")
	}
	if fb.calls() != 0 {
		t.Error("a refused request reached the backend")
	}
}

// TestMCPRun: the SDK's client, over a real socket, lists the tool and
// runs a snippet; each run_python call is one execution in the audit line
// of the POST that carried it, admitted and bounded by the caller's grant.
func TestMCPRun(t *testing.T) {
	fb := &fakeBackend{ready: true, result: wire.Result{SandboxID: "sb-1", Process: wire.Process{Stdout: "42\n"}}}
	s, logs := newFrontServer(t, fb, &fakeCaller{})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	cs, err := mcpSession(t, ts.URL, "bot")
	if err != nil {
		t.Fatal(err)
	}
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != mcpserver.ToolName {
		t.Fatalf("tools %+v, %v", tools, err)
	}
	res, err := callRun(cs, map[string]any{"code": "print(6*7)", "timeout_s": 5})
	if err != nil {
		t.Fatal(err)
	}
	if txt := res.Content[0].(*mcp.TextContent).Text; res.IsError || !strings.Contains(txt, "stdout:\n42") {
		t.Fatalf("result %q (isError %v)", txt, res.IsError)
	}
	if fb.calls() != 1 || fb.jobs[0].Code != "print(6*7)" || fb.jobs[0].Timeout != 5*time.Second {
		t.Errorf("backend got %+v", fb.jobs)
	}
	lines := runLines(t, logs, MCPPath, 1)
	if len(lines) != 1 {
		t.Fatalf("%d audit lines with a run, want 1: %s", len(lines), logs)
	}
	line := lines[0]
	if line["caller"] != granted.User || line["outcome"] != wire.OutcomeOK || line["code_sha256"] != codeHash("print(6*7)") ||
		line["sandbox_id"] != "sb-1" || line["id"] != res.Meta["request_id"] {
		t.Errorf("audit line %v, result _meta %v", line, res.Meta)
	}
	if strings.Contains(logs.String(), "print(6*7)") {
		t.Error("the code is in the log")
	}

	// A timeout over the caller's grant (30 s) is the model's to fix.
	res, err = callRun(cs, map[string]any{"code": "x", "timeout_s": 31})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "timeout_s of 30 at most") {
		t.Errorf("timeout over the grant: %+v, %v, want a tool error", res, err)
	}
	if fb.calls() != 1 {
		t.Error("a refused call reached the backend")
	}

	// No sandbox is the host's problem: a protocol error.
	fb.err = api.ErrNoCapacity
	_, err = callRun(cs, map[string]any{"code": "x"})
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) || werr.Code != mcpserver.CodeUnavailable || !strings.Contains(werr.Message, "no warm sandbox") {
		t.Errorf("no capacity: %v, want a protocol error", err)
	}
}

// TestMCPQuotaPerCall: the caller's in-flight bound (1 for bot) counts
// run_python calls, not MCP messages: while one call runs, another
// session still connects and lists the tools, and its call is refused
// with a protocol error naming the quota.
func TestMCPQuotaPerCall(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	fb := &fakeBackend{ready: true, run: func(ctx context.Context, job exec.Job) (wire.Result, error) {
		close(started)
		<-release
		return wire.Result{SandboxID: "sb"}, nil
	}}
	s, _ := newFrontServer(t, fb, &fakeCaller{})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	var once sync.Once
	defer once.Do(func() { close(release) }) // ts.Close waits for the first call
	first, err := mcpSession(t, ts.URL, "bot")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := callRun(first, map[string]any{"code": "x"}); done <- err }()
	<-started
	second, err := mcpSession(t, ts.URL, "bot")
	if err != nil {
		t.Fatalf("a second session while a call runs: %v", err)
	}
	if _, err := second.ListTools(context.Background(), nil); err != nil {
		t.Fatalf("list while a call runs: %v", err)
	}
	_, err = callRun(second, map[string]any{"code": "x"})
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) || !strings.Contains(werr.Message, "over its quota") || !strings.Contains(string(werr.Data), `"status":429`) {
		t.Errorf("second call: %v, want a protocol error for the quota", err)
	}
	once.Do(func() { close(release) })
	if err := <-done; err != nil {
		t.Errorf("first call: %v", err)
	}
}

// TestMCPClientGone: a client that goes away mid-run ends the run, as on
// /v1/execute: the backend's context is cancelled.
func TestMCPClientGone(t *testing.T) {
	started, ended := make(chan struct{}), make(chan struct{})
	fb := &fakeBackend{ready: true, run: func(ctx context.Context, job exec.Job) (wire.Result, error) {
		close(started)
		select {
		case <-ctx.Done():
			close(ended)
		case <-time.After(20 * time.Second):
		}
		return wire.Result{}, ctx.Err()
	}}
	s, _ := newFrontServer(t, fb, &fakeCaller{})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	ctx, cancel := context.WithCancel(context.Background())
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"import time; time.sleep(60)"}}}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+MCPPath, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer bot")
	go func() {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the call never reached the backend")
	}
	cancel()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the run went on after its client left")
	}
}
