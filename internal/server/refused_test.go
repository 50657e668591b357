package server

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

// TestRefusedCountedAndLogged: each request refused before its body is read
// is counted by status and logged in one line that names the path and never
// holds the body.
func TestRefusedCountedAndLogged(t *testing.T) {
	var logs syncBuffer
	s, err := New(Options{Backend: &fakeBackend{}, Logger: slog.New(slog.NewJSONHandler(&logs, nil)), MaxBody: 64, Version: "v9.9.9"})
	if err != nil {
		t.Fatal(err)
	}
	const secret = "SECRET-BODY"
	body := `{"code":"print('` + secret + `')"}`
	for _, tt := range []struct {
		name, method, path string
		header             map[string]string
		status             int
	}{
		{"no such path", "POST", "/v1/nothing", nil, http.StatusNotFound},
		{"wrong method", "PUT", "/v1/execute", nil, http.StatusMethodNotAllowed},
		{"a web page", "POST", "/v1/execute", map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"compressed", "POST", "/v1/execute", map[string]string{"Content-Encoding": "gzip"}, http.StatusUnsupportedMediaType},
		{"too large", "POST", "/v1/execute", nil, http.StatusRequestEntityTooLarge},
	} {
		b := body
		if tt.status == http.StatusRequestEntityTooLarge {
			b = body + strings.Repeat(" ", 64)
		}
		req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(b))
		for k, v := range tt.header {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		if rec.Code != tt.status {
			t.Errorf("%s: status %d, want %d", tt.name, rec.Code, tt.status)
		}
	}
	// One more 404, so that the counter is seen to count.
	do(t, s.Handler(), "GET", "/nothing", "")

	metrics := do(t, s.Handler(), "GET", "/metrics", "").Body.String()
	for _, want := range []string{
		`sandbox_requests_refused_total{code="404"} 2`,
		`sandbox_requests_refused_total{code="405"} 1`,
		`sandbox_requests_refused_total{code="403"} 1`,
		`sandbox_requests_refused_total{code="413"} 1`,
		`sandbox_requests_refused_total{code="415"} 1`,
		`sandbox_build_info{go_version="` + runtime.Version() + `",version="v9.9.9"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("a refused body was logged:\n%s", logs.String())
	}
	refusedLines := 0
	for line := range strings.Lines(logs.String()) {
		var l map[string]any
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if l["msg"] == "request" && l["outcome"] == nil {
			refusedLines++
			if l["path"] == nil || l["status"] == nil || l["error"] == nil {
				t.Errorf("refused line without path, status or error: %s", line)
			}
		}
	}
	// 413 is its execution's line; the other five are refusals of their own.
	if refusedLines != 5 {
		t.Errorf("%d refused lines, want 5:\n%s", refusedLines, logs.String())
	}
}
