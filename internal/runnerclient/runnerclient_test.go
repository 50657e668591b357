package runnerclient

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/wire"
)

// TestPost: each kind of answer a runner can give is read into the error
// its callers tell apart.
func TestPost(t *testing.T) {
	for _, tt := range []struct {
		name     string
		status   int
		body     string
		limit    int64
		check    func(t *testing.T, err error)
		wantStdo string
	}{
		{name: "ok", status: 200, body: `{"sandbox_id":"p","exit_code":0,"stdout":"hi"}`, limit: 100, wantStdo: "hi",
			check: func(t *testing.T, err error) {
				if err != nil {
					t.Fatal(err)
				}
			}},
		{name: "unsealed", status: 503, body: `{"error":"` + api.NotSealed + `: route found"}`, limit: 100,
			check: func(t *testing.T, err error) {
				var r *Refusal
				if !errors.As(err, &r) || !r.Unsealed() || r.Answer().Status != http.StatusBadGateway {
					t.Fatalf("%#v", err)
				}
			}},
		{name: "bad request", status: 400, body: `{"error":"timeout_s out of range"}`, limit: 100,
			check: func(t *testing.T, err error) {
				var r *Refusal
				if !errors.As(err, &r) || r.Unsealed() || r.Answer().Status != 400 || r.Answer().Msg != "timeout_s out of range" {
					t.Fatalf("%#v", err)
				}
			}},
		{name: "runner failed", status: 500, body: `oops`, limit: 100,
			check: func(t *testing.T, err error) {
				var r *Refusal
				if !errors.As(err, &r) || r.Answer().Status != 502 || !strings.Contains(r.Answer().Msg, "pod p: runner answered 500: oops") {
					t.Fatalf("%#v", err)
				}
			}},
		{name: "over the limit", status: 200, body: `{"stdout":"` + strings.Repeat("x", 100) + `"}`, limit: 100,
			check: func(t *testing.T, err error) {
				ae, ok := api.AsError(err)
				if !ok || ae.Status != 502 || !strings.Contains(ae.Msg, "over 100 bytes") {
					t.Fatalf("%#v", err)
				}
			}},
		// Valid JSON that is not a result: passed on, it would be a 200
		// with no run's answer in it.
		{name: "empty object", status: 200, body: `{}`, limit: 100, check: notAResult},
		{name: "null", status: 200, body: `null`, limit: 100, check: notAResult},
		{name: "no exit code", status: 200, body: `{"sandbox_id":"p","stdout":"hi"}`, limit: 100, check: notAResult},
		{name: "not JSON", status: 200, body: `<html>`, limit: 100,
			check: func(t *testing.T, err error) {
				if ae, ok := api.AsError(err); !ok || ae.Status != 502 {
					t.Fatalf("%#v", err)
				}
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/execute" || r.Header.Get("Content-Type") != "application/json" {
					http.Error(w, "wrong request", http.StatusTeapot)
					return
				}
				w.WriteHeader(tt.status)
				w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			var out struct{ Stdout string }
			_, err := Post(t.Context(), srv.Client(), srv.Listener.Addr().String(), "/v1/execute", "pod p", []byte(`{}`), tt.limit, &out)
			tt.check(t, err)
			if out.Stdout != tt.wantStdo {
				t.Errorf("decoded %q, want %q", out.Stdout, tt.wantStdo)
			}
		})
	}
}

// notAResult checks for the 502 of an answer that is not a result.
func notAResult(t *testing.T, err error) {
	t.Helper()
	ae, ok := api.AsError(err)
	if !ok || ae.Status != http.StatusBadGateway || !strings.Contains(ae.Msg, "not a result") {
		t.Fatalf("%#v, want a 502 saying the answer is not a result", err)
	}
}

// TestPostCallNeedsResult: a tool call's answer carries "result" (null
// when the tool returned nothing): one without it is not a call's answer.
func TestPostCallNeedsResult(t *testing.T) {
	for body, want := range map[string]bool{
		`{"sandbox_id":"p","exit_code":0,"result":null,"error":{"kind":"raised"}}`: true,
		`{"sandbox_id":"p","exit_code":0,"result":{"sum":3}}`:                      true,
		`{"sandbox_id":"p","exit_code":0}`:                                         false,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(body)) }))
		var out wire.CallResult
		_, err := Post(t.Context(), srv.Client(), srv.Listener.Addr().String(), "/v1/call", "pod p", nil, 1<<20, &out)
		srv.Close()
		if (err == nil) != want {
			t.Errorf("%s: %v, want ok %v", body, err, want)
		}
	}
}

// TestPostLost: a runner that cannot be reached, or that breaks off its
// answer, is a *Lost: whether the job ran is for the caller to find out.
func TestPostLost(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(1000))
		w.WriteHeader(200)
		w.Write([]byte(`{"stdout":`))
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	}))
	defer cut.Close()
	// An answer delimited by the connection's close (no length, not
	// chunked) cut mid-way, as a runner's is when its node dies: the
	// transport reads the close as the end, and only the body's being no
	// whole JSON tells that it broke.
	closeCut := rawServer(t, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{\"sandbox_id\":\"p\",\"exit_")
	closeEmpty := rawServer(t, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
	for name, addr := range map[string]string{"refused": closed, "cut": cut.Listener.Addr().String(),
		"close-delimited cut": closeCut, "close-delimited empty": closeEmpty} {
		var out struct{}
		_, err := Post(t.Context(), http.DefaultClient, addr, "/v1/call", "pod p", nil, 1<<20, &out)
		var lost *Lost
		if !errors.As(err, &lost) {
			t.Errorf("%s: %#v, want a *Lost", name, err)
		}
	}
}

// rawServer answers every connection with raw, whatever was asked, then
// closes it: an answer no net/http server would write, byte for byte.
func rawServer(t *testing.T, raw string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				// Read the request's head and body (small), then answer.
				buf := make([]byte, 64<<10)
				c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				for {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
				c.Write([]byte(raw))
			}()
		}
	}()
	return l.Addr().String()
}
