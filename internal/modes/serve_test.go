package modes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"github.com/sandboxd/sandbox/wire"
)

// parse parses args into a fresh CLI the way Main does.
func parse(t *testing.T, args ...string) *CLI {
	t.Helper()
	var cli CLI
	p, err := kong.New(&cli, kong.Name("sandbox"), vars(), kong.Exit(func(int) { t.Fatalf("kong exited on %q", args) }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return &cli
}

// startServe runs `sandbox serve --backend local` on a free port and returns
// its URL.
func startServe(t *testing.T, extra ...string) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := parse(t, append([]string{"serve", "--backend", "local", "--listen", addr, "--log-format", "json"}, extra...)...).Serve
	ctx, cancel := context.WithCancel(context.Background())
	var logs bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- c.Run(&Deps{Ctx: ctx, Stdout: new(bytes.Buffer), Stderr: &logs}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v\n%s", err, logs.String())
		}
	})
	url := "http://" + addr
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return url
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not become ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runExec runs `sandbox exec` with args against url and returns its exit
// code (0, or ExitError's), stdout and stderr.
func runExec(t *testing.T, url string, args ...string) (int, string, string) {
	t.Helper()
	c := parse(t, append([]string{"exec", "--url", url}, args...)...).Exec
	var stdout, stderr bytes.Buffer
	err := c.Run(&Deps{Ctx: context.Background(), Stdout: &stdout, Stderr: &stderr})
	var ee *ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &ee):
		return ee.Code, stdout.String(), stderr.String()
	}
	t.Fatalf("exec %q: %v", args, err)
	return 0, "", ""
}

func TestServeAndExec(t *testing.T) {
	url := startServe(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "s.py")
	os.WriteFile(script, []byte("print(open('data/in.bin','rb').read().hex())\n"), 0o644)
	blob := filepath.Join(dir, "blob")
	os.WriteFile(blob, []byte{0xff, 0x00, 0x01}, 0o644)

	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string // substring
	}{
		{"prints", []string{"-c", "print(1+1)"}, 0, "2\n", ""},
		{"exit code", []string{"-c", "import sys; print('x', file=sys.stderr); sys.exit(3)"}, 3, "", "x\n"},
		{"uncaught exception", []string{"-c", "1/0"}, 1, "", "ZeroDivisionError"},
		{"timeout", []string{"--timeout", "1s", "-c", "print('before', flush=True)\nwhile True: pass"}, 124, "before\n", "timed out after 1s"},
		{"file and input", []string{"--file", "data/in.bin=" + blob, script}, 0, "ff0001\n", ""},
		{"bad request", []string{"--timeout", "61s", "-c", "pass"}, 125, "", "the service refused the request (400): timeout_s 61 out of range"},
		{"bad path", []string{"--file", "../x=" + blob, "-c", "pass"}, 125, "", `refused the request (400): files[0]: file path "../x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runExec(t, url, tt.args...)
			if code != tt.code || stdout != tt.stdout || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("exit %d stdout %q stderr %q; want %d %q and stderr with %q", code, stdout, stderr, tt.code, tt.stdout, tt.stderr)
			}
		})
	}
}

func TestExecJSON(t *testing.T) {
	url := startServe(t)
	code, stdout, _ := runExec(t, url, "--json", "-c", "import sys; print('hi'); sys.exit(2)")
	var res wire.Result
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("--json printed %q: %v", stdout, err)
	}
	if code != 0 || res.Stdout != "hi\n" || res.ExitCode != 2 || !strings.HasPrefix(res.SandboxID, "local-") {
		t.Errorf("exit %d, result %+v", code, res)
	}
}

// TestExecOutputs: --output brings files back into --output-dir, says
// what it left out and why, and a symlink the snippet made comes back as a
// note, not a file.
func TestExecOutputs(t *testing.T) {
	url := startServe(t)
	dir := filepath.Join(t.TempDir(), "made")
	code := "import os\nos.makedirs('out/d')\nopen('out/r.csv','w').write('a\\n1\\n')\n" +
		"open('out/d/p.bin','wb').write(b'\\x89PNG')\nos.symlink('/etc/passwd', 'out/leak')\nprint('ok')\n"
	exit, stdout, stderr := runExec(t, url, "--output", "out/**", "--output-dir", dir, "-c", code)
	if exit != 0 || stdout != "ok\n" {
		t.Fatalf("exit %d stdout %q stderr %q", exit, stdout, stderr)
	}
	if !strings.Contains(stderr, "out/leak: not brought back: symlink") {
		t.Errorf("stderr %q does not name the symlink", stderr)
	}
	for p, want := range map[string]string{"out/r.csv": "a\n1\n", "out/d/p.bin": "\x89PNG"} {
		if b, err := os.ReadFile(filepath.Join(dir, p)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v", p, b, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "out/leak")); err == nil {
		t.Error("out/leak written")
	}
}

func TestExecUnreachable(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	url := "http://" + ln.Addr().String()
	ln.Close()
	code, _, stderr := runExec(t, url, "-c", "pass")
	if code != 125 || !strings.Contains(stderr, "cannot reach the sandbox service at "+url) {
		t.Errorf("exit %d stderr %q", code, stderr)
	}
}

func TestExecFlags(t *testing.T) {
	for _, args := range [][]string{
		{"exec"},
		{"exec", "-c", "pass", "file.py"},
		{"exec", "--timeout", "500ms", "-c", "pass"},
		{"exec", "--output", "../*", "-c", "pass"},
		{"exec", "--output-dir", "d", "-c", "pass"},
		{"exec", "--call", "m:f", "--image", "i", "--output", "*"},
	} {
		var cli CLI
		p, err := kong.New(&cli, kong.Name("sandbox"), vars())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Parse(args); err == nil {
			t.Errorf("%q parsed", args)
		}
	}
}

func TestExecStdin(t *testing.T) {
	c := &ExecCmd{Source: "-", Timeout: 1500 * time.Millisecond}
	req, err := c.request(strings.NewReader("print(1)"))
	if err != nil {
		t.Fatal(err)
	}
	if req.Code != "print(1)" || *req.TimeoutS != 2 {
		t.Errorf("request = %+v", req)
	}
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if err := (&VersionCmd{}).Run(&Deps{Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "sandbox dev (go") {
		t.Errorf("version = %q", out.String())
	}
}

// firstWrite is a writer that notes when it was first written to.
type firstWrite struct {
	bytes.Buffer
	at time.Time
}

func (w *firstWrite) Write(p []byte) (int, error) {
	if w.at.IsZero() {
		w.at = time.Now()
	}
	return w.Buffer.Write(p)
}

// TestExecPrintsAsItComes: `sandbox exec` writes a line the snippet
// printed a second before the snippet ends, each stream to its own.
func TestExecPrintsAsItComes(t *testing.T) {
	url := startServe(t)
	c := parse(t, "exec", "--url", url, "-c", "import sys, time\nprint('one', flush=True)\n"+
		"print('e', file=sys.stderr, flush=True)\ntime.sleep(1)\nprint('two')\nsys.exit(4)").Exec
	var stdout, stderr firstWrite
	err := c.Run(&Deps{Ctx: context.Background(), Stdout: &stdout, Stderr: &stderr})
	ended := time.Now()
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 4 || stdout.String() != "one\ntwo\n" || stderr.String() != "e\n" {
		t.Fatalf("exit %v, stdout %q, stderr %q", err, stdout.String(), stderr.String())
	}
	if d := ended.Sub(stdout.at); d < 800*time.Millisecond {
		t.Errorf("stdout first written %s before the end, want about a second", d)
	}
}
