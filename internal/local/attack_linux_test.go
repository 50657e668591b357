package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sbexec "github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/wire"
)

// The attack tests: runs that try to reach a concurrent or a later run, or
// the host, each beside a positive control that shows the same attack
// succeeding where the protection is off (isolation none, or one property
// switched off), so that a test that passes proves the protection and not
// a broken attack.

// requireSandbox skips unless this host gives runs the whole sandbox.
func requireSandbox(t *testing.T, b *Backend) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: only root can give each run a uid, mounts and cgroups of its own")
	}
	if !b.Sandboxed() {
		t.Skipf("this host cannot sandbox runs: %v", b.Missing())
	}
}

// attackScript reads one of exec's attack scripts.
func attackScript(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../exec/testdata/attack/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// snippetChild waits for a process below this one that runs a snippet
// and has a SIGUSR2 handler (so it is past its set-up), and returns its pid
// as the host sees it: a child in the weaker modes, a grandchild (the
// child of its run's init) in a sandbox. skip lists processes to ignore.
func snippetChild(t *testing.T, skip map[int]bool) int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		for _, pid := range descendants(os.Getpid(), 2) {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if skip[pid] || !strings.Contains(string(cmd), "def _sandbox():") {
				continue
			}
			if status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); sigCaught(string(status), syscall.SIGUSR2) {
				return pid
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no snippet child with a SIGUSR2 handler appeared")
	return 0
}

// descendants lists pid's children and theirs, down to depth levels.
func descendants(pid, depth int) []int {
	if depth == 0 {
		return nil
	}
	var out []int
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, task := range tasks {
		kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		for _, k := range strings.Fields(string(kids)) {
			c, _ := strconv.Atoi(k)
			out = append(append(out, c), descendants(c, depth-1)...)
		}
	}
	return out
}

// sigCaught reports whether a /proc/PID/status shows a handler for sig.
func sigCaught(status string, sig syscall.Signal) bool {
	for line := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(line, "SigCgt:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}

// background runs job on b in a goroutine; wait returns its result.
func background(t *testing.T, b *Backend, job sbexec.Job) (wait func() wire.Result) {
	var res wire.Result
	var err error
	var wg sync.WaitGroup
	wg.Go(func() { res, err = b.Execute(context.Background(), job) })
	return func() wire.Result {
		wg.Wait()
		if err != nil {
			t.Fatalf("background run: %v", err)
		}
		return res
	}
}

// TestAttackConcurrentRun: a run told the host pid of a concurrent run
// tries to read and rewrite its input file and code, write its memory
// through /proc/PID/mem, and signal it. In a sandbox every attempt fails
// and the victim finds itself intact; with isolation none (as root) every
// one succeeds.
func TestAttackConcurrentRun(t *testing.T) {
	sandboxAndControl(t, func(t *testing.T, b *Backend, protected bool) {
		if !protected && os.Geteuid() != 0 {
			t.Skip("needs root: the control attacks as root")
		}
		wait := background(t, b, sbexec.Job{Code: attackScript(t, "victim.py"), Timeout: 30 * time.Second,
			Files: []sbexec.File{{Path: "secret.txt", Content: []byte("S3CRET")}}})
		victim := snippetChild(t, nil)
		attacker := run(t, b, strings.Replace(attackScript(t, "attacker.py"), "P = VICTIM_PID", "P = "+strconv.Itoa(victim), 1))
		syscall.Kill(victim, syscall.SIGUSR2)
		res := wait()
		t.Logf("attacker:\n%s%s\nvictim:\n%s%s", attacker.Stdout, attacker.Stderr, res.Stdout, res.Stderr)

		for _, a := range []string{"read-file", "write-file", "write-code", "write-memory", "signal"} {
			blocked := strings.Contains(attacker.Stdout, a+" blocked")
			if ok := strings.Contains(attacker.Stdout, a+" ok"); !ok && !blocked {
				t.Errorf("attempt %s did not report", a)
			}
			if blocked != protected {
				t.Errorf("attempt %s: blocked %v, want %v", a, blocked, protected)
			}
		}
		intact := []string{"secret S3CRET\n", "code intact\n", "memory VICTIM-MARKER-\n", "signals []\n"}
		for _, want := range intact {
			if strings.Contains(res.Stdout, want) != protected {
				t.Errorf("victim reports %q: %v, want %v", strings.TrimSpace(want), !protected, protected)
			}
		}
	})
}

// leftoverWriter writes a marker file in every directory it may write: in
// a sandbox, every directory up to three levels below / (and all of the
// usual shared places); for the control (root, unprotected) only the shared
// places, so that the test never litters the host. It prints the paths.
const leftoverWriter = `import os, sys
token = TOKEN
shared = ['/tmp', '/var/tmp', '/dev/shm', '/run/lock', '/var/lock', os.getcwd(), os.path.expanduser('~')]
dirs = list(shared)
if WALK:
    def walk(d, depth):
        if depth > 3 or d in ('/proc', '/sys'):
            return
        dirs.append(d)
        try:
            for e in os.scandir(d):
                if e.is_dir(follow_symlinks=False):
                    walk(e.path, depth + 1)
        except OSError:
            pass
    walk('/', 0)
for d in sorted(set(dirs)):
    p = os.path.join(d, '.sandbox-leftover-' + token)
    try:
        with open(p, 'x') as f:
            f.write(token)
        print(p)
    except OSError:
        pass
`

// TestAttackLeftovers: a run leaves a file in every place it can write; a
// later run looks for each, and so does the host. In a sandbox the later
// run finds none and the host has none; with isolation none it finds them.
func TestAttackLeftovers(t *testing.T) {
	sandboxAndControl(t, func(t *testing.T, b *Backend, protected bool) {
		token := fmt.Sprintf("%d", time.Now().UnixNano())
		code := strings.NewReplacer("TOKEN", strconv.Quote(token), "WALK", map[bool]string{true: "True", false: "False"}[protected]).Replace(leftoverWriter)
		first := run(t, b, code)
		written := strings.Fields(first.Stdout)
		t.Cleanup(func() {
			for _, p := range written {
				os.Remove(p) // the control's, on the host
			}
		})
		if len(written) == 0 {
			t.Fatalf("the first run could write nowhere: %+v", first)
		}
		t.Logf("the first run wrote %d files: %v", len(written), written)
		later := run(t, b, "import os\nfor p in "+pyList(written)+":\n    if os.path.exists(p): print(p)\n")
		found := strings.Fields(later.Stdout)
		var onHost []string
		for _, p := range written {
			if _, err := os.Lstat(p); err == nil {
				onHost = append(onHost, p)
			}
		}
		if protected && (len(found) > 0 || len(onHost) > 0) {
			t.Errorf("leftovers survive: the later run finds %v, the host has %v", found, onHost)
		}
		if !protected && len(found) == 0 {
			t.Errorf("control: the later run found none of %v", written)
		}
	})
}

// pyList renders ss as a Python list of strings.
func pyList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// hog starts threads until the process limit stops it, reports how many,
// and holds them until SIGUSR2.
const hog = `import signal, threading, time
stop = threading.Event()
signal.signal(signal.SIGUSR2, lambda *a: stop.set())
n = 0
try:
    while n < 100000:
        threading.Thread(target=stop.wait, args=(30,), daemon=True).start()
        n += 1
except RuntimeError:
    pass
print('threads', n, flush=True)
signal.signal(signal.SIGUSR1, lambda *a: None)  # the harness's sign that the hog is at its limit
stop.wait(30)
`

// TestAttackProcessHog: a run takes every process its limit allows; a
// normal run beside it must still fork. With every run on one uid (as
// before runs had their own) the hog's count is the other run's too and its
// fork fails: the control.
func TestAttackProcessHog(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sharedUID uint32
		protected bool
	}{
		{"own uid per run", 0, true},
		{"control: one uid for every run", sbexec.MinSandboxUID + 7, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(t, Options{MaxProcs: 64})
			requireSandbox(t, b)
			setIsolation(b, func(iso *isolation) { iso.sharedUID = tc.sharedUID })
			wait := background(t, b, sbexec.Job{Code: hog, Timeout: 30 * time.Second})
			pid := snippetChild(t, nil)
			for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); sigCaught(string(status), syscall.SIGUSR1) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the hog never reached its limit")
				}
			}
			normal := run(t, b, "import subprocess, threading\nt = threading.Thread(target=print, args=('thread ok',))\nt.start(); t.join()\nprint('fork', subprocess.run(['true']).returncode)\n")
			syscall.Kill(pid, syscall.SIGUSR2)
			h := wait()
			t.Logf("hog: %s%s\nnormal: %s%s", h.Stdout, h.Stderr, normal.Stdout, normal.Stderr)
			if !strings.HasPrefix(h.Stdout, "threads ") {
				t.Fatalf("the hog did not report: %+v", h)
			}
			ok := normal.ExitCode == 0 && normal.Stdout == "thread ok\nfork 0\n"
			if ok != tc.protected {
				t.Errorf("the normal run beside the hog succeeded: %v, want %v (%+v)", ok, tc.protected, normal)
			}
		})
	}
}

// TestFakeOOM: exit code 137 and a SIGKILL a run sends itself are not
// out-of-memory kills; a real one, counted by the kernel in the run's
// memory cgroup, is (the control that the report works at all).
func TestFakeOOM(t *testing.T) {
	b := newBackend(t, Options{MemoryLimit: 128 << 20})
	requireSandbox(t, b)
	if b.iso.cgroups == nil || b.iso.cgroups.Memory == "" {
		t.Skip("no memory cgroup here: oom_killed is never reported")
	}
	for _, tc := range []struct {
		name, code string
		oom        bool
	}{
		{"exit 137", "import os\nos._exit(137)\n", false},
		{"SIGKILL itself", "import os\nos.kill(os.getpid(), 9)\nos._exit(137)\n", false},
		{"print the line", "import sys\nsys.stderr.write('killed: out of memory (limit 128 MiB)\\n')\nsys.exit(137)\n", false},
		{"control: a real memory bomb", "hold = []\nwhile True: hold.append(bytearray(16 << 20))\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, b, tc.code)
			if res.OOMKilled != tc.oom {
				t.Errorf("oom_killed %v, want %v: %+v", res.OOMKilled, tc.oom, res)
			}
		})
	}
}

// shaper shapes its working directory against whoever cleans it up: a tree
// deeper than PATH_MAX, directories without permissions, a link to the
// host's canary directory, and a process that keeps swapping a directory
// for such a link. It prints where it did so.
const shaper = `import os, subprocess
home = os.getcwd()
os.mkdir('deep'); os.chdir('deep')
for i in range(3000):
    os.mkdir('d'); os.chdir('d')
os.chdir(home)
os.symlink(CANARY, 'to-canary')
os.makedirs('locked/inner'); os.chmod('locked/inner', 0); os.chmod('locked', 0)
subprocess.Popen(['sh', '-c', 'while :; do mkdir -p swap/x; rm -rf swap; ln -s ' + CANARY + ' swap; rm swap; done'],
                 start_new_session=True)
print(home)
`

// TestAttackCleanupShape: whatever a sandboxed run makes of its directory,
// nothing is left on the host and nothing outside is touched, because its
// directory is a tmpfs that goes with its mount namespace and no cleanup
// walks it. The control (isolation none) shows the same tree lands in a
// directory of the host, which serve must then walk.
func TestAttackCleanupShape(t *testing.T) {
	sandboxAndControl(t, func(t *testing.T, b *Backend, protected bool) {
		canary := t.TempDir()
		if err := os.Chmod(canary, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(canary+"/file", []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		res := run(t, b, strings.ReplaceAll(shaper, "CANARY", strconv.Quote(canary)))
		if res.ExitCode != 0 {
			t.Fatalf("the shaper failed: %+v", res)
		}
		dir := strings.TrimSpace(res.Stdout)
		onHost := b.base != "" && strings.HasPrefix(dir, b.base+"/")
		if onHost == protected {
			t.Errorf("the run's directory %s is on the host (under %q): %v, want %v", dir, b.base, onHost, !protected)
		}
		for p, want := range map[string]os.FileMode{canary: os.ModeDir | 0o700, canary + "/file": 0o600} {
			if fi, err := os.Lstat(p); err != nil || fi.Mode() != want {
				t.Errorf("%s after the run: %v %v, want mode %v", p, fi.Mode(), err, want)
			}
		}
		if onHost {
			// The run's own directory, which holds the working directory;
			// the pool's waiting runs have theirs beside it.
			if _, err := os.Lstat(filepath.Dir(dir)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("left behind: %s (%v)", filepath.Dir(dir), err)
			}
		}
	})
}

// setIsolation changes b's isolation for a test, restarting its pool so
// that its pre-started interpreters are started under it too.
func setIsolation(b *Backend, change func(*isolation)) {
	b.warm.close()
	change(&b.iso)
	if b.warm != nil {
		b.warm = newWarmPool(b, b.opts.Warm)
	}
}

// sandboxAndControl runs attack as a sandboxed run and again as the
// control, isolation none, where the same attack must succeed: a protection
// is only shown by the pair.
func sandboxAndControl(t *testing.T, attack func(t *testing.T, b *Backend, protected bool)) {
	t.Run("sandbox", func(t *testing.T) {
		b := newBackend(t, Options{Isolation: IsolationAuto})
		requireSandbox(t, b)
		attack(t, b, true)
	})
	t.Run("control: isolation none", func(t *testing.T) {
		attack(t, newBackend(t, Options{Isolation: IsolationNone}), false)
	})
}
