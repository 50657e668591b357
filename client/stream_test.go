package client

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/wire"
)

// TestExecuteStream: each answer a streamed execution can get is read into
// output and a result, or into the error Execute gives the same answer.
func TestExecuteStream(t *testing.T) {
	const events = "text/event-stream"
	for _, tt := range []struct {
		name, ctype, body string
		status            int
		wantOut, wantRes  string
		check             func(t *testing.T, err error)
	}{
		{name: "events", ctype: events, status: 200,
			body:    "event: stdout\ndata: \"a\\n\"\n\nevent: stderr\r\ndata: \"e\"\r\n\r\nevent: progress\ndata: {}\n\nevent: result\ndata: {\"stdout\":\"a\\n\",\"stderr\":\"e\"}\n\n",
			wantOut: "stdout:a\n|stderr:e|", wantRes: "a\n"},
		{name: "error event", ctype: events, status: 200,
			body:    "event: stdout\ndata: \"a\"\n\nevent: error\ndata: {\"error\":\"pod died\",\"status\":502}\n\n",
			wantOut: "stdout:a|",
			check: func(t *testing.T, err error) {
				var e *Error
				if !errors.As(err, &e) || e.StatusCode != 502 || e.Message != "pod died" || e.RequestID != "req-1" || !e.BrokeOff {
					t.Fatalf("%#v", err)
				}
			}},
		{name: "cut short", ctype: events, status: 200, body: "event: stdout\ndata: \"a\"\n\nevent: res",
			wantOut: "stdout:a|",
			check: func(t *testing.T, err error) {
				if err == nil || !strings.Contains(err.Error(), "unexpected EOF") {
					t.Fatalf("%v, want a cut answer", err)
				}
			}},
		{name: "ended without result", ctype: events, status: 200, body: "event: stdout\ndata: \"a\"\n\n",
			wantOut: "stdout:a|",
			check: func(t *testing.T, err error) {
				if err == nil || !strings.Contains(err.Error(), "before its result") {
					t.Fatalf("%v", err)
				}
			}},
		{name: "plain JSON", ctype: "application/json", status: 200, body: `{"stdout":"all","stderr":"e"}`,
			wantOut: "stdout:all|stderr:e|", wantRes: "all"},
		{name: "401", ctype: "application/json", status: 401, body: `{"error":"token expired"}`,
			check: func(t *testing.T, err error) {
				var ae *AuthError
				if !errors.As(err, &ae) || ae.Message != "token expired" {
					t.Fatalf("%#v", err)
				}
			}},
		{name: "429", ctype: "application/json", status: 429, body: `{"error":"slow down"}`,
			check: func(t *testing.T, err error) {
				var qe *QuotaError
				if !errors.As(err, &qe) {
					t.Fatalf("%#v", err)
				}
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Accept") != events {
					http.Error(w, "no Accept: "+events, http.StatusTeapot)
					return
				}
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", tt.ctype)
				w.Header().Set("X-Request-Id", "req-1")
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			c, err := New(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			res, err := c.ExecuteStream(t.Context(), wire.ExecuteRequest{Code: "x"}, func(stream, text string) {
				out.WriteString(stream + ":" + text + "|")
			})
			if tt.check != nil {
				tt.check(t, err)
			} else if err != nil {
				t.Fatal(err)
			}
			if out.String() != tt.wantOut || res.Stdout != tt.wantRes {
				t.Errorf("output %q, result stdout %q; want %q, %q", out.String(), res.Stdout, tt.wantOut, tt.wantRes)
			}
		})
	}
}
