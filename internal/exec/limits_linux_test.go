package exec

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestLimitsApplied(t *testing.T) {
	res := run(t, Job{Code: `import resource as r
for k in (r.RLIMIT_CORE, r.RLIMIT_FSIZE, r.RLIMIT_NPROC, r.RLIMIT_NOFILE):
    print(*r.getrlimit(k))`}, Options{MaxProcs: 77, MaxFileSize: 1 << 20})
	if want := "0 0\n1048576 1048576\n77 77\n1024 1024\n"; res.Stdout != want {
		t.Errorf("limits = %q, stderr %q; want %q", res.Stdout, res.Stderr, want)
	}
}

// TestSnippetYieldsToItsRunner: the snippet is the OOM killer's first
// choice and, with Nice, the scheduler's last, so that a bomb leaves the
// runner that shares its pod the memory and CPU to kill it. Without the
// preamble's lines a fresh python3 reads 0, 0 and False here.
func TestSnippetYieldsToItsRunner(t *testing.T) {
	res := run(t, Job{Code: `import os
print(open("/proc/self/oom_score_adj").read().strip(), os.nice(0), os.sched_getscheduler(0) == os.SCHED_IDLE)`}, Options{Nice: 19, IdleCPU: true})
	if want := "1000 19 True\n"; res.Stdout != want {
		t.Errorf("oom_score_adj, nice and SCHED_IDLE = %q, stderr %q; want %q", res.Stdout, res.Stderr, want)
	}
}

func TestFileSizeLimit(t *testing.T) {
	res := run(t, Job{Code: `open("big", "wb").write(b"x" * (2 << 20))`}, Options{MaxFileSize: 1 << 20})
	if res.ExitCode != 1 || !strings.Contains(res.Stderr, "File too large") {
		t.Errorf("exit %d, stderr %q; want exit 1 and EFBIG", res.ExitCode, res.Stderr)
	}
}

// nobody is the uid/gid the unprivileged tests run the child as.
const nobody = 65534

// unprivileged returns Options that run the child as nobody in a directory
// nobody can use, or skips the test when we cannot switch uid.
func unprivileged(t *testing.T) Options {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the child as another uid; RLIMIT_NPROC does not bind root, and as non-root the test would count our own processes too")
	}
	dir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	return Options{Dir: dir, Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
}

func TestForkBombContained(t *testing.T) {
	opts := unprivileged(t)
	opts.MaxProcs = 20
	res := run(t, Job{Code: `import os, time
n = 0
try:
    for _ in range(500):
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
except OSError as e:
    print("fork failed after", n, e.strerror)
`, Files: []File{{Path: "owned.txt", Content: []byte("x")}}}, opts)
	if !strings.HasPrefix(res.Stdout, "fork failed after") || res.ExitCode != 0 {
		t.Errorf("stdout %q, stderr %q, exit %d; want fork to fail", res.Stdout, res.Stderr, res.ExitCode)
	}
	if fi, err := os.Stat(filepath.Join(opts.Dir, "owned.txt")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != nobody {
		t.Errorf("input file not owned by the child's uid: %v", err)
	}
}

func TestMemoryLimitReportsOOM(t *testing.T) {
	tests := []struct {
		name       string
		cloneflags uintptr
	}{
		{name: "plain"},
		// As a PID namespace's init the preamble cannot SIGKILL itself.
		{name: "pid namespace init", cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.cloneflags != 0 && os.Geteuid() != 0 {
				t.Skip("needs root to make namespaces")
			}
			res := run(t, Job{Code: "print('before')\nhold = [bytearray(1 << 30)]\n"},
				Options{MemoryLimit: 256 << 20, Cloneflags: tt.cloneflags})
			if !res.OOMKilled || res.ExitCode != 137 {
				t.Errorf("oom_killed %v, exit %d; want true, 137 (stderr %q)", res.OOMKilled, res.ExitCode, res.Stderr)
			}
			if !strings.HasSuffix(res.Stderr, "MemoryError\nkilled: out of memory (limit 256 MiB)\n") || res.Stdout != "before\n" {
				t.Errorf("stdout %q, stderr %q", res.Stdout, res.Stderr)
			}
		})
	}
}
