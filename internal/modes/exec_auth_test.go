package modes

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/wire"
)

func TestExecToken(t *testing.T) {
	t.Setenv("SANDBOX_TOKEN_FILE", "")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", "req-7")
		switch r.Header.Get("Authorization") {
		case "Bearer granted":
			api.WriteJSON(w, http.StatusOK, wire.Result{SandboxID: "s", Process: wire.Process{Stdout: "ok\n"}})
		case "Bearer other":
			api.WriteError(w, http.StatusForbidden, "system:serviceaccount:agents:other may not run snippets")
		default:
			api.WriteError(w, http.StatusUnauthorized, "no bearer token")
		}
	}))
	defer srv.Close()
	dir := t.TempDir()
	granted, other := filepath.Join(dir, "granted"), filepath.Join(dir, "other")
	os.WriteFile(granted, []byte("granted\n"), 0o600)
	os.WriteFile(other, []byte("other\n"), 0o600)

	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"granted", []string{"--token-file", granted}, 0, "ok\n", ""},
		{"no token", nil, 125, "",
			"sandbox: exec: the service did not accept the token (401): no bearer token (set --token-file or SANDBOX_TOKEN_FILE) [request req-7]\n"},
		{"not granted", []string{"--token-file", other}, 125, "",
			"sandbox: exec: the service does not let this caller do that (403): system:serviceaccount:agents:other may not run snippets [request req-7]\n"},
		{"unreadable", []string{"--token-file", filepath.Join(dir, "missing")}, 125, "", "not sent: bearer token: open " + dir},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := os.Stat(client.DefaultTokenFile); tt.args == nil && err == nil {
				t.Skip("this machine has a token at " + client.DefaultTokenFile)
			}
			code, stdout, stderr := runExec(t, srv.URL, append(tt.args, "-c", "print(1)")...)
			oneLine := strings.HasPrefix(stderr, "sandbox: exec: ") && strings.Count(stderr, "\n") == 1
			if code != tt.code || stdout != tt.stdout || !strings.Contains(stderr, tt.stderr) || (tt.stderr == "") != (stderr == "") || tt.code != 0 && !oneLine {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q, %q", code, stdout, stderr, tt.code, tt.stdout, tt.stderr)
			}
		})
	}
}
