package bench

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestClientScriptSends: the client script's load mode sends the snippet
// it is given (print(1) without one) with the caller's token, and judges a
// given snippet by its exit code alone; its fresh mode runs python3 -c.
func TestClientScriptSends(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	var codes []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Code string `json:"code"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &req)
		codes = append(codes, req.Code+" "+r.Header.Get("Authorization"))
		exit := 0
		if strings.Contains(req.Code, "fail") {
			exit = 1
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"sandbox_id": "p", "stdout": "", "exit_code": exit})
	}))
	defer srv.Close()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("T\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) []Sample {
		cmd := exec.Command("python3", append([]string{"-c", clientScript}, args...)...)
		cmd.Env = append(os.Environ(), "SANDBOX_TOKEN_FILE="+tok)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		var s []Sample
		for line := range strings.Lines(string(out)) {
			var x Sample
			if err := json.Unmarshal([]byte(line), &x); err != nil {
				t.Fatalf("%v printed %q", args, line)
			}
			s = append(s, x)
		}
		return s
	}
	for _, tt := range []struct {
		args []string
		sent string
		ok   bool
	}{
		{[]string{"load", srv.URL, "1", "1", "x = 1"}, "x = 1 Bearer T", true},
		{[]string{"load", srv.URL, "1", "1", "fail()"}, "fail() Bearer T", false},
		{[]string{"load", srv.URL, "1", "1"}, "print(1) Bearer T", false}, // stdout is not "1\n"
	} {
		codes = nil
		s := run(tt.args...)
		if len(s) != 1 || s[0].OK != tt.ok || len(codes) != 1 || codes[0] != tt.sent {
			t.Errorf("%v: samples %+v, server saw %q; want ok=%v and %q", tt.args, s, codes, tt.ok, tt.sent)
		}
	}
	if s := run("fresh", "2", "import sys; sys.exit(0)"); len(s) != 2 || !s[0].OK || !s[1].OK {
		t.Errorf("fresh: %+v", s)
	}
	if s := run("fresh", "1", "raise SystemExit(3)"); len(s) != 1 || s[0].OK {
		t.Errorf("fresh of a failing snippet: %+v", s)
	}
}
