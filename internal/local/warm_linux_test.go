package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	sbexec "github.com/sandboxd/sandbox/internal/exec"
)

// warmBackend returns a backend whose every execution runs on one of its
// pre-started interpreters, preloaded with modules of the standard library
// that a fresh python3 does not import.
func warmBackend(t *testing.T, opts Options) *Backend {
	t.Helper()
	opts.Preload = []string{"decimal", "json"}
	b := newBackend(t, opts)
	saved := warmOnly
	warmOnly = true
	t.Cleanup(func() { warmOnly = saved })
	return b
}

// TestWarmOneJobEach: two jobs in a row run on two pre-started, preloaded
// interpreters, in two sandboxes: the second sees none of what the first
// left (its PID namespace, files in every place it could write, a mark in
// its interpreter) and not the first's processes. A run started for its job
// (the control) sees no preload.
func TestWarmOneJobEach(t *testing.T) {
	b := warmBackend(t, Options{})
	requireSandbox(t, b)
	const probe = `import builtins, os, sys
print('ns', os.readlink('/proc/self/ns/pid'))
print('preloaded', 'decimal' in sys.modules)
print('marked', hasattr(builtins, 'sandbox_mark'))
builtins.sandbox_mark = True
dirs = ['/tmp', '/var/tmp', '/dev/shm', os.getcwd()]
print('found', [d for d in dirs if os.path.exists(os.path.join(d, 'mark'))])
for d in dirs:
    try:
        open(os.path.join(d, 'mark'), 'x').close()
    except OSError:
        pass
print('procs', len([p for p in os.listdir('/proc') if p.isdigit()]))
`
	first, second := run(t, b, probe), run(t, b, probe)
	t.Logf("first:\n%s%s\nsecond:\n%s%s", first.Stdout, first.Stderr, second.Stdout, second.Stderr)
	if n := b.warmTaken.Load(); n != 2 {
		t.Fatalf("%d of the 2 jobs ran on a pre-started interpreter", n)
	}
	ns := regexp.MustCompile(`ns (\S+)`)
	a, c := ns.FindStringSubmatch(first.Stdout), ns.FindStringSubmatch(second.Stdout)
	if a == nil || c == nil || a[1] == c[1] {
		t.Errorf("the jobs' PID namespaces: %v and %v, want two", a, c)
	}
	for _, res := range []string{first.Stdout, second.Stdout} {
		want := "preloaded True\nmarked False\nfound []\n"
		if b.Sandboxed() {
			want += "procs 2\n" // its init and its python3
		}
		if !strings.Contains(res, want) {
			t.Errorf("a job saw %q, want %q", res, want)
		}
	}
	warmOnly = false
	cold, err := b.run(context.Background(), sbexec.Job{Code: probe, Timeout: 20 * time.Second}, b.iso)
	if err != nil || !strings.Contains(cold.Stdout, "preloaded False\n") {
		t.Errorf("control: a run started for its job saw %+v %v, want no preload", cold, err)
	}
}

// TestWarmCloseLeavesNothing: Close kills every waiting interpreter, with
// its init, and removes its cgroups; before it both are there (the
// control that the test sees them).
func TestWarmCloseLeavesNothing(t *testing.T) {
	requirePython(t)
	b, err := New(context.Background(), Options{Warm: 2, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); b.warm.waiting() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Close()
			t.Fatalf("%d interpreters pre-started, want 2", b.warm.waiting())
		}
	}
	var pids []int
	var cgroups []string
	for _, r := range b.warm.idle {
		<-r.p.Ready()
		pids = append(pids, r.p.Pid())
	}
	all := descendants(os.Getpid(), 3)
	for _, pid := range all {
		if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(cmd), "def _sandbox():") {
			pids = append(pids, pid) // python3, below its init when sandboxed
		}
	}
	for _, pid := range pids[:2] {
		// The init's own cgroups, as the host names them.
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		for _, m := range regexp.MustCompile(`:(memory|pids|cpu):(/\S*sandbox-run-\S+)`).FindAllStringSubmatch(string(b), -1) {
			if d := filepath.Join("/sys/fs/cgroup", m[1], m[2]); exists(d) {
				cgroups = append(cgroups, d)
			}
		}
	}
	t.Logf("before Close: processes %v, cgroups %v", pids, cgroups)
	if len(pids) < 4 && b.Sandboxed() || len(pids) < 2 {
		t.Fatalf("control: the waiting interpreters' processes are %v", pids)
	}
	if b.Sandboxed() && b.iso.cgroups != nil && len(cgroups) < 2 {
		t.Fatalf("control: the waiting interpreters' cgroups are %v", cgroups)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			t.Errorf("process %d is left after Close: %v %s", pid, err, stat)
		}
	}
	for _, d := range cgroups {
		if exists(d) {
			t.Errorf("cgroup %s is left after Close", d)
		}
	}
	if n := b.warm.waiting(); n != 0 {
		t.Errorf("%d interpreters wait after Close", n)
	}
}

// TestThroughThePool runs the attack tests, and those of a run's basic
// guarantees, again in a child process in which every execution waits for
// a pre-started interpreter and never starts one for itself.
func TestThroughThePool(t *testing.T) {
	if warmOnly {
		t.Skip("already the run through the pool")
	}
	if testing.Short() {
		t.Skip("runs a dozen tests again")
	}
	requirePython(t)
	tests := []string{"TestAttackConcurrentRun", "TestAttackLeftovers", "TestAttackProcessHog", "TestFakeOOM",
		"TestAttackCleanupShape", "TestExecutePrints", "TestFreshDirectory", "TestNonRootWhenRoot", "TestPIDNamespace",
		"TestNoNetwork", "TestInvalidJobIs400"}
	cmd := exec.Command(os.Args[0], "-test.run", "^("+strings.Join(tests, "|")+")$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "SANDBOX_TEST_WARM_ONLY=1")
	out, err := cmd.CombinedOutput()
	t.Logf("through the pool:\n%s", out)
	if err != nil {
		t.Fatalf("tests through the pool: %v", err)
	}
	for _, name := range tests {
		if !strings.Contains(string(out), "--- PASS: "+name) && !strings.Contains(string(out), "--- SKIP: "+name) {
			t.Errorf("%s did not pass through the pool", name)
		}
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return !errors.Is(err, os.ErrNotExist)
}
