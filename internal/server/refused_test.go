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
		{"headers too large", "POST", "/v1/execute", map[string]string{"X-Pad": strings.Repeat("a", maxHeaderBytes)}, http.StatusRequestHeaderFieldsTooLarge},
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
		`sandbox_requests_refused_total{code="431"} 1`,
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
	// 413 is its execution's line; the other six are refusals of their own.
	if refusedLines != 6 {
		t.Errorf("%d refused lines, want 6:\n%s", refusedLines, logs.String())
	}
}

// TestOversizedHeadersAnswerJSON: over a real connection, headers past
// this service's bound get its JSON 431 (Go's server would answer plain
// text only past its own 1 MiB); headers just within it run (control).
func TestOversizedHeadersAnswerJSON(t *testing.T) {
	s, err := New(Options{Backend: &fakeBackend{}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	for _, tt := range []struct {
		pad    int
		status int
	}{
		{maxHeaderBytes - 1024, http.StatusOK},
		{maxHeaderBytes, http.StatusRequestHeaderFieldsTooLarge},
		{512 << 10, http.StatusRequestHeaderFieldsTooLarge},
	} {
		req, _ := http.NewRequest("POST", ts.URL+"/v1/execute", strings.NewReader(`{"code":"print(1)"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Pad", strings.Repeat("a", tt.pad))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error string `json:"error"`
		}
		decErr := json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("%d bytes of header: status %d, want %d", tt.pad, resp.StatusCode, tt.status)
		}
		if tt.status != http.StatusOK && (decErr != nil || !strings.Contains(body.Error, "headers hold")) {
			t.Errorf("%d bytes of header: body %+v (%v), want a JSON error saying how much", tt.pad, body, decErr)
		}
	}
}
