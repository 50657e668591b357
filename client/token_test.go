package client

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
