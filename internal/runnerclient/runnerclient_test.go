package runnerclient

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/internal/api"
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
		{name: "ok", status: 200, body: `{"stdout":"hi"}`, limit: 100, wantStdo: "hi",
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
	for name, addr := range map[string]string{"refused": closed, "cut": cut.Listener.Addr().String()} {
		var out struct{}
		_, err := Post(t.Context(), http.DefaultClient, addr, "/v1/call", "pod p", nil, 1<<20, &out)
		var lost *Lost
		if !errors.As(err, &lost) {
			t.Errorf("%s: %#v, want a *Lost", name, err)
		}
	}
}
