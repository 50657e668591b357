package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/wire"
)

// authServer answers every request with status and body and records the
// Authorization header of each.
func authServer(t *testing.T, status int, body string, header http.Header) (*httptest.Server, *[]string) {
	t.Helper()
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
		for k, v := range header {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv, &got
}

func TestTokenFileIsReadForEachRequest(t *testing.T) {
	srv, got := authServer(t, 200, `{"sandbox_id":"s"}`, nil)
	path := filepath.Join(t.TempDir(), "token")
	c, err := New(srv.URL, WithTokenSource(TokenFile(path)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"tok-1\n", "  tok-2  "} { // the kubelet rotated it in between
		if err := os.WriteFile(path, []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Execute(t.Context(), wire.ExecuteRequest{Code: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Ready(t.Context()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"Bearer tok-1", "Bearer tok-2", ""}; strings.Join(*got, "|") != strings.Join(want, "|") {
		t.Errorf("Authorization = %q, want %q (none for /readyz)", *got, want)
	}
}

func TestDefaultTokenSource(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "eyJhbGciOi.abc-_~+/=\n")
	missing := filepath.Join(dir, "missing")
	tests := []struct {
		name, env, fallback string
		header              string // sent; "" for none
		errHas              string // or the request fails before it is sent
	}{
		{"env names the file", good, missing, "Bearer eyJhbGciOi.abc-_~+/=", ""},
		{"env names a missing file", missing, good, "", "no such file"},
		{"no env, default file present", "", good, "Bearer eyJhbGciOi.abc-_~+/=", ""},
		{"no env, no default file", "", missing, "", ""},
		{"empty", "", write("empty", " \n"), "", "is empty"},
		{"a space inside", "", write("two", "secret-a secret-b\n"), "", "not a bearer token"},
		{"a newline inside", "", write("nl", "secret-a\nsecret-b"), "", "not a bearer token"},
		{"too big", "", write("big", strings.Repeat("s", maxToken+1)), "", "not a token"},
		{"a directory", "", dir, "", "is a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, got := authServer(t, 200, `{"sandbox_id":"s"}`, nil)
			c, _ := New(srv.URL, WithTokenSource(defaultTokenSource(tt.env, tt.fallback)))
			_, err := c.Execute(t.Context(), wire.ExecuteRequest{Code: "x"})
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) || len(*got) != 0 {
					t.Fatalf("err = %v, %d requests sent; want %q and none", err, len(*got), tt.errHas)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Errorf("the error shows the token: %v", err)
				}
				return
			}
			if err != nil || len(*got) != 1 || (*got)[0] != tt.header {
				t.Errorf("err = %v, Authorization = %q, want %q", err, *got, tt.header)
			}
		})
	}
}

func TestAuthAndQuotaErrors(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		body       string
		retryAfter string
		auth       bool
		quota      bool
		temporary  bool
	}{
		{"no token", 401, `{"error":"no bearer token"}`, "", true, false, false},
		{"not granted", 403, `{"error":"system:serviceaccount:a:b may not run snippets"}`, "", true, false, false},
		{"over quota", 429, `{"error":"over 4 requests in flight"}`, "7", false, true, true},
		{"bad request", 400, `{"error":"missing code"}`, "", false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{"X-Request-Id": {"req-9"}}
			if tt.retryAfter != "" {
				h.Set("Retry-After", tt.retryAfter)
			}
			srv, got := authServer(t, tt.status, tt.body, h)
			c, _ := New(srv.URL, WithTokenSource(func(context.Context) (string, error) { return "t", nil }))
			_, err := c.Call(t.Context(), wire.CallRequest{Image: "i", Function: "m:f"})
			var ae *AuthError
			var qe *QuotaError
			var e *Error
			if errors.As(err, &ae) != tt.auth || errors.As(err, &qe) != tt.quota || !errors.As(err, &e) {
				t.Fatalf("err = %T %v: want auth %v, quota %v, and an *Error", err, err, tt.auth, tt.quota)
			}
			if e.StatusCode != tt.status || e.RequestID != "req-9" || !strings.Contains(tt.body, e.Message) || IsTemporary(err) != tt.temporary {
				t.Errorf("error = %+v, temporary %v", e, IsTemporary(err))
			}
			if tt.quota && qe.RetryAfter != 7*time.Second {
				t.Errorf("RetryAfter = %s", qe.RetryAfter)
			}
			if len(*got) != 1 {
				t.Errorf("%d requests, want 1: the client does not retry", len(*got))
			}
		})
	}
}
