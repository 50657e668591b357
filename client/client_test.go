package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/wire"
)

func TestExecute(t *testing.T) {
	var gotBody, gotPath, gotCT string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotBody, gotPath, gotCT = string(b), r.URL.Path, r.Header.Get("Content-Type")
		w.Write([]byte(`{"sandbox_id":"sb-1","request_id":"req-1","stdout":"2\n","stderr":"","exit_code":0,"duration_ms":5}`))
	}))
	defer srv.Close()
	c, err := New(srv.URL + "/") // a trailing slash is fine
	if err != nil {
		t.Fatal(err)
	}
	timeout := 3
	res, err := c.Execute(context.Background(), wire.ExecuteRequest{Code: "print(1+1)", TimeoutS: &timeout})
	if err != nil {
		t.Fatal(err)
	}
	if res.SandboxID != "sb-1" || res.RequestID != "req-1" || res.Stdout != "2\n" {
		t.Errorf("result = %+v", res)
	}
	if gotPath != "/v1/execute" || gotCT != "application/json" || gotBody != `{"code":"print(1+1)","timeout_s":3}`+"\n" {
		t.Errorf("request = %s %s %q", gotPath, gotCT, gotBody)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		body      string
		header    string
		msg       string
		retry     time.Duration
		temporary bool
	}{
		{"bad request", 400, `{"error":"missing code"}`, "", "missing code", 0, false},
		{"no capacity", 503, `{"error":"no warm sandbox pod available"}`, "5", "no warm sandbox pod available", 5 * time.Second, true},
		{"not our service", 502, `<html>Bad Gateway</html>`, "", "unexpected answer: <html>Bad Gateway</html>", 0, false},
		{"empty body", 500, ``, "", "empty answer", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.header != "" {
					w.Header().Set("Retry-After", tt.header)
				}
				w.WriteHeader(tt.status)
				w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			c, _ := New(srv.URL)
			_, err := c.Execute(context.Background(), wire.ExecuteRequest{Code: "x"})
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want *client.Error", err)
			}
			if e.StatusCode != tt.status || e.Message != tt.msg || e.RetryAfter != tt.retry || IsTemporary(err) != tt.temporary {
				t.Errorf("error = %+v (temporary %v)", e, IsTemporary(err))
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Error() = %q does not carry the message", err)
			}
		})
	}
}

func TestNewRejectsBadURL(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://x", "http://", "://"} {
		if _, err := New(u); err == nil {
			t.Errorf("New(%q) succeeded", u)
		}
	}
}

func TestContextCancels(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // the server notices a client gone only once the body is read
		<-r.Context().Done()
	}))
	defer srv.Close()
	c, _ := New(srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.Execute(ctx, wire.ExecuteRequest{Code: "x"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the context's deadline", err)
	}
}
