package exec

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandbox/wire"
)

// run runs code in a fresh directory with a short timeout.
func run(t *testing.T, job Job, opts Options) wire.Result {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if job.Timeout == 0 {
		job.Timeout = 10 * time.Second
	}
	res, err := Run(t.Context(), job, opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

func TestRunBasics(t *testing.T) {
	tests := []struct {
		name     string
		code     string
		files    []File
		wantOut  string
		wantErr  string // substring of stderr
		wantExit int
	}{
		{name: "print", code: "print(1)", wantOut: "1\n"},
		{name: "exit code", code: "import sys; sys.exit(3)", wantExit: 3},
		{name: "exception", code: "x = 1\nraise ValueError('boom')\n", wantExit: 1,
			wantErr: "line 2, in <module>\n    raise ValueError('boom')\nValueError: boom"},
		{name: "syntax error", code: "print(\n", wantExit: 1, wantErr: "SyntaxError"},
		{name: "killed by signal", code: "import os, signal; os.kill(os.getpid(), signal.SIGTERM)", wantExit: 128 + 15},
		{name: "stdin at EOF", code: "import sys; print(repr(sys.stdin.read()))", wantOut: "''\n"},
		{name: "main module", code: "print(__name__, sorted(k for k in globals() if not k.startswith('__')))", wantOut: "__main__ []\n"},
		{name: "files and imports", code: "import helper; print(helper.X, open('data/in.txt').read())",
			files:   []File{{Path: "helper.py", Content: []byte("X = 42\n")}, {Path: "data/in.txt", Content: []byte("hi")}},
			wantOut: "42 hi\n"},
		{name: "stderr", code: "import sys; sys.stderr.write('err')", wantErr: "err"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, Job{Code: tt.code, Files: tt.files}, Options{})
			if res.Stdout != tt.wantOut || res.ExitCode != tt.wantExit || !strings.Contains(res.Stderr, tt.wantErr) {
				t.Errorf("got stdout %q exit %d stderr %q; want stdout %q exit %d stderr containing %q",
					res.Stdout, res.ExitCode, res.Stderr, tt.wantOut, tt.wantExit, tt.wantErr)
			}
			if strings.Contains(res.Stderr, "_sandbox") {
				t.Errorf("the preamble shows in stderr: %q", res.Stderr)
			}
		})
	}
}

func TestRunEnvironment(t *testing.T) {
	t.Setenv("SANDBOX_SECRET", "leak")
	dir := t.TempDir()
	res := run(t, Job{Code: `import os, json
print(json.dumps({"cwd": os.getcwd(), "env": dict(os.environ), "pgid": os.getpgid(0) == os.getpid()}))`}, Options{Dir: dir})
	var got struct {
		Cwd  string
		Env  map[string]string
		Pgid bool
	}
	if err := json.Unmarshal([]byte(res.Stdout), &got); err != nil {
		t.Fatalf("decode %q: %v (stderr %q)", res.Stdout, err, res.Stderr)
	}
	if got.Cwd != dir {
		t.Errorf("cwd = %q, want %q", got.Cwd, dir)
	}
	if got.Env["HOME"] != dir || got.Env["LANG"] != "C.UTF-8" || got.Env["PATH"] == "" {
		t.Errorf("env = %v", got.Env)
	}
	if _, ok := got.Env["SANDBOX_SECRET"]; ok {
		t.Errorf("the runner's environment leaked: %v", got.Env)
	}
	if !got.Pgid {
		t.Error("the child is not the leader of its own process group")
	}
}

func TestRunNonUTF8(t *testing.T) {
	res := run(t, Job{Code: `import sys; sys.stdout.buffer.write(b"caf\xc3\xa9 \xff\xfe ok\n")`}, Options{})
	if !utf8.ValidString(res.Stdout) {
		t.Fatalf("stdout is not valid UTF-8: %q", res.Stdout)
	}
	if res.Stdout != "café \uFFFD ok\n" {
		t.Errorf("stdout = %q", res.Stdout)
	}
	b, err := json.Marshal(res)
	if err != nil || !json.Valid(b) {
		t.Fatalf("marshal: %v", err)
	}
}

func TestRunRejectsBadFiles(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink(outside, dir+"/link"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"../x", "/etc/x", "link/x", "a\x00b"} {
		_, err := Run(t.Context(), Job{Code: "print(1)", Files: []File{{Path: p, Content: []byte("x")}}}, Options{Dir: dir})
		if !errors.Is(err, ErrInvalidJob) {
			t.Errorf("path %q: err = %v, want ErrInvalidJob", p, err)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("a file escaped into %s: %v", outside, ents)
	}
}

func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := Run(ctx, Job{Code: "import time; time.sleep(30)", Timeout: time.Minute}, Options{Dir: t.TempDir()})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the context's error", err)
	}
}
