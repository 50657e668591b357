package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/api"
	sbexec "github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/wire"
)

func requirePython(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
}

func newBackend(t testing.TB, opts Options) *Backend {
	t.Helper()
	requirePython(t)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	b, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func run(t *testing.T, b *Backend, code string) wire.Result {
	t.Helper()
	res, err := b.Execute(context.Background(), sbexec.Job{Code: code, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("Execute(%q): %v", code, err)
	}
	return res
}

func TestExecutePrints(t *testing.T) {
	b := newBackend(t, Options{})
	res := run(t, b, "print('hello')")
	if res.Stdout != "hello\n" || res.ExitCode != 0 || res.Stderr != "" {
		t.Errorf("result = %+v", res)
	}
	if !strings.HasPrefix(res.SandboxID, "local-") {
		t.Errorf("sandbox_id = %q, want local-…", res.SandboxID)
	}
}

func TestIDsDiffer(t *testing.T) {
	b := newBackend(t, Options{})
	a, c := run(t, b, "pass"), run(t, b, "pass")
	if a.SandboxID == c.SandboxID {
		t.Errorf("two executions share sandbox_id %q", a.SandboxID)
	}
}

// TestFreshDirectory: input files arrive, the directory starts otherwise
// empty, temporary files go where no other run looks (the private /tmp of a
// sandbox, else the run's own directory beside it, never the working
// directory), and it is gone after the run.
func TestFreshDirectory(t *testing.T) {
	b := newBackend(t, Options{})
	job := sbexec.Job{Timeout: 20 * time.Second, Files: []sbexec.File{{Path: "in/data.txt", Content: []byte("42")}},
		Code: "import os, tempfile\nprint(os.getcwd())\nprint(sorted(os.listdir('.')))\nprint(open('in/data.txt').read())\n" +
			"print(tempfile.gettempdir() == os.getcwd())\nopen('out.txt','w').write('x')\nos.makedirs('locked/inner')\nos.chmod('locked', 0)\n"}
	res, err := b.Execute(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if res.ExitCode != 0 || len(lines) != 4 || lines[1] != "['in']" || lines[2] != "42" || lines[3] != "False" {
		t.Fatalf("result = %+v", res)
	}
	if b.Sandboxed() {
		// The directory never was on the host; nothing is left in the base.
		if b.base != "" {
			t.Errorf("a sandboxed backend made a directory on the host: %s", b.base)
		}
	} else if _, err := os.Stat(lines[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("run directory %s still exists: %v", lines[0], err)
	}
	second := run(t, b, "import os\nprint(os.listdir('.'))")
	if second.Stdout != "[]\n" {
		t.Errorf("second run sees %q, want an empty directory", second.Stdout)
	}
}

func TestNonRootWhenRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: the child keeps our uid")
	}
	b := newBackend(t, Options{})
	res := run(t, b, "import os\nprint(os.getuid(), os.getgid(), os.getgroups())")
	var uid, gid uint32
	var groups string
	if _, err := fmt.Sscanf(res.Stdout, "%d %d %s", &uid, &gid, &groups); err != nil || uid != gid || groups != "[]" ||
		uid < sbexec.MinSandboxUID || uid > sbexec.MaxSandboxUID {
		t.Errorf("uid gid groups = %q, want one id from the sandbox range and no groups", res.Stdout)
	}
	// The child cannot write where root keeps things.
	res = run(t, b, "open('/etc/sandbox-test','w')")
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "PermissionError") && !strings.Contains(res.Stderr, "Read-only file system") {
		t.Errorf("writing /etc as the child: %+v", res)
	}
}

func TestPIDNamespace(t *testing.T) {
	b := newBackend(t, Options{})
	if !b.Isolated() {
		t.Skip("namespaces unavailable on this host")
	}
	host, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	if res := run(t, b, "import os\nprint(os.readlink('/proc/self/ns/pid'))"); res.ExitCode != 0 || res.Stdout == host+"\n" {
		t.Errorf("pid namespace inside = %+v, want other than the host's %s", res, host)
	}
}

// TestNoNetwork: a connect to a listener in this process fails inside the
// sandbox, and succeeds from the same code without isolation (the positive
// control: the listener is reachable, so the failure is the isolation's).
func TestNoNetwork(t *testing.T) {
	isolated := newBackend(t, Options{})
	if !isolated.Isolated() {
		t.Skip("namespaces unavailable on this host: the local backend runs with the host's network")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait() // after the Close below: deferred calls run last first
	defer ln.Close()
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hi"))
			c.Close()
		}
	})
	code := fmt.Sprintf(`import socket
try:
    s = socket.create_connection(("127.0.0.1", %d), timeout=3)
    print("connected", s.recv(2).decode())
except OSError as e:
    print("refused", e.errno)
`, ln.Addr().(*net.TCPAddr).Port)

	control := newBackend(t, Options{Isolation: IsolationNone})
	if res := run(t, control, code); res.Stdout != "connected hi\n" {
		t.Fatalf("positive control could not connect: %+v", res)
	}
	if res := run(t, isolated, code); !strings.HasPrefix(res.Stdout, "refused") {
		t.Errorf("isolated run reached the host's listener: %+v", res)
	}
}

func TestInvalidJobIs400(t *testing.T) {
	b := newBackend(t, Options{})
	_, err := b.Execute(context.Background(), sbexec.Job{Code: "pass", Files: []sbexec.File{{Path: "../x"}}})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
		t.Errorf("Execute with a bad path = %v, want a 400 *api.Error", err)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	b := newBackend(t, Options{MaxConcurrent: 1, QueueWait: 200 * time.Millisecond})
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		// The slot is taken once acquire returns; signal from inside.
		_, err := b.Execute(context.Background(), sbexec.Job{Code: "import time\ntime.sleep(3)", Timeout: 20 * time.Second})
		done <- err
	}()
	go func() {
		for b.busy.Load() == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		close(started)
	}()
	<-started
	begin := time.Now()
	_, err := b.Execute(context.Background(), sbexec.Job{Code: "pass", Timeout: 20 * time.Second})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || ae.RetryAfter <= 0 {
		t.Fatalf("Execute while full = %v, want 503 with Retry-After", err)
	}
	if d := time.Since(begin); d < 200*time.Millisecond || d > 2*time.Second {
		t.Errorf("waited %v for a slot, want about the queue wait", d)
	}
	if err := <-done; err != nil {
		t.Errorf("first execution: %v", err)
	}
	// With the slot free again, the next one runs.
	run(t, b, "pass")
}

func TestQueueWaitRespectsContext(t *testing.T) {
	b := newBackend(t, Options{MaxConcurrent: 1})
	b.sem <- struct{}{} // take the only slot
	defer func() { <-b.sem }()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := b.Execute(ctx, sbexec.Job{Code: "pass"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Execute with an ended context = %v", err)
	}
}

func TestStrictIsolation(t *testing.T) {
	requirePython(t)
	b, err := New(context.Background(), Options{Isolation: IsolationStrict})
	if err != nil {
		t.Logf("strict isolation unavailable here: %v", err)
		return
	}
	defer b.Close()
	if !b.Isolated() {
		t.Error("strict isolation gave a backend without namespaces")
	}
}

// TestFallback: where the host has no sandbox and the kernel refuses the
// namespaces, auto falls back (keeping a uid per run when root), logs each
// property it lacks, and strict refuses to start.
func TestFallback(t *testing.T) {
	requirePython(t)
	saved := namespaces
	namespaces = syscall.CLONE_NEWPID | syscall.CLONE_THREAD // EINVAL: CLONE_THREAD needs CLONE_SIGHAND
	sandboxOff = errors.New("switched off by the test")
	defer func() { namespaces, sandboxOff = saved, nil }()

	var logs strings.Builder
	b := newBackend(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if b.Isolated() {
		t.Fatal("Isolated with namespaces the kernel refuses")
	}
	for _, p := range append([]string{propNamespaces}, propSandbox...) {
		if !strings.Contains(logs.String(), "missing=\""+p) {
			t.Errorf("the missing property %q is not logged:\n%s", p, logs.String())
		}
	}
	res := run(t, b, "import os\nprint(os.getuid())")
	if got := strings.TrimSpace(res.Stdout); os.Geteuid() == 0 && (got == "0" || got == "65534") {
		t.Errorf("uid after fallback = %q, want one of its own", got)
	}
	if _, err := New(context.Background(), Options{Isolation: IsolationStrict}); err == nil {
		t.Error("strict isolation started without namespaces")
	}
}

func TestNoPython(t *testing.T) {
	for _, iso := range []string{IsolationAuto, IsolationNone} {
		_, err := New(context.Background(), Options{Python: "/nonexistent/python3", Isolation: iso})
		if err == nil || !strings.Contains(err.Error(), "cannot run snippets") {
			t.Errorf("isolation %s: New with a missing interpreter = %v, want an error at start", iso, err)
		}
	}
}

// testWriter sends the backend's log to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
