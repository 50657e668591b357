package exec

import (
	"context"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/wire"
)

// spawnTree starts the processes a snippet may leave behind and writes their
// pids, one a line, to pids.txt in the working directory: a grandchild that
// called setsid() (a double-forked daemon), a child in its own process group
// that ignores SIGTERM, and a background writer that keeps printing to the
// inherited stdout.
const spawnTree = `import os, signal, subprocess, sys, time
pids = []
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(w, b"%d\n" % os.getpid())
        time.sleep(300)
    os._exit(0)
pids.append(int(os.read(r, 32)))
p = subprocess.Popen([sys.executable, "-c",
    "import os, signal, time; os.setpgid(0, 0); signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"])
pids.append(p.pid)
q = subprocess.Popen([sys.executable, "-u", "-c",
    "import time\nwhile True:\n    print('beat', flush=True)\n    time.sleep(0.01)"])
pids.append(q.pid)
with open("pids.txt", "w") as f:
    f.write("".join("%d\n" % p for p in pids))
print("started", flush=True)
sys.stderr.write("before the end\n")
`

func TestTimeoutKillsEveryProcess(t *testing.T) {
	dir := t.TempDir()
	res := run(t, Job{Code: spawnTree + "time.sleep(300)\n", Timeout: 2 * time.Second}, Options{Dir: dir})
	if !res.TimedOut || res.ExitCode != -1 {
		t.Errorf("timed_out = %v, exit_code = %d; want true, -1", res.TimedOut, res.ExitCode)
	}
	if !strings.HasSuffix(res.Stderr, "before the end\ntimed out after 2s\n") {
		t.Errorf("stderr = %q, want the code's output and then the timeout line", res.Stderr)
	}
	if !strings.HasPrefix(res.Stdout, "started\n") {
		t.Errorf("stdout = %q", res.Stdout)
	}
	assertDead(t, dir)
}

func TestNormalExitKillsEveryProcess(t *testing.T) {
	dir := t.TempDir()
	start := time.Now()
	res := run(t, Job{Code: spawnTree, Timeout: 30 * time.Second}, Options{Dir: dir})
	if res.TimedOut || res.ExitCode != 0 {
		t.Errorf("timed_out = %v, exit_code = %d, stderr %q; want false, 0", res.TimedOut, res.ExitCode, res.Stderr)
	}
	if time.Since(start) > 20*time.Second {
		t.Errorf("Run waited for the background processes instead of killing them")
	}
	assertDead(t, dir)
}

// assertDead checks that every pid in dir/pids.txt is gone, not even a zombie.
func assertDead(t *testing.T, dir string) {
	t.Helper()
	b, err := os.ReadFile(dir + "/pids.txt")
	if err != nil {
		t.Fatalf("the snippet did not record its pids: %v", err)
	}
	pids := strings.Fields(string(b))
	if len(pids) != 3 {
		t.Fatalf("pids.txt = %q, want 3 pids", b)
	}
	for _, s := range pids {
		pid, _ := strconv.Atoi(s)
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			stat, _ := os.ReadFile("/proc/" + s + "/stat")
			t.Errorf("pid %d outlived the run: kill(pid, 0) = %v, stat %q", pid, err, stat)
		}
	}
}

// TestConcurrentRunsKeepTheirChildren checks that one run's sweep leaves a
// concurrent run alone: the local backend runs several in one process.
func TestConcurrentRunsKeepTheirChildren(t *testing.T) {
	long := make(chan wire.Result, 1)
	go func() {
		res, err := Run(t.Context(), Job{Code: `import subprocess, sys, time
p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5); print('child done')"])
time.sleep(0.1)
p.wait()
print("parent done", p.returncode)`, Timeout: 20 * time.Second}, Options{Dir: t.TempDir()})
		if err != nil {
			t.Errorf("long run: %v", err)
		}
		long <- res
	}()
	time.Sleep(300 * time.Millisecond)
	for range 5 {
		// Each short run sweeps when it ends.
		run(t, Job{Code: spawnTree}, Options{})
	}
	res := <-long
	if res.Stdout != "child done\nparent done 0\n" {
		t.Errorf("the long run was disturbed: stdout %q, stderr %q", res.Stdout, res.Stderr)
	}
}

// TestNamespaces runs the child in new PID, mount and network namespaces, as
// the local backend does when it can.
func TestNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make namespaces")
	}
	dir := t.TempDir()
	res, err := Run(t.Context(), Job{Code: `import os, socket
print(os.getpid())
try:
    socket.create_connection(("1.1.1.1", 53), timeout=1)
    print("network")
except OSError:
    print("no network")`, Timeout: 10 * time.Second},
		Options{Dir: dir, Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWNET})
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) {
		t.Skipf("namespaces not allowed here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "1\nno network\n" {
		t.Errorf("stdout %q, stderr %q; want pid 1 and no network", res.Stdout, res.Stderr)
	}
}

func TestNamespacesTimeout(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make namespaces")
	}
	res, err := Run(t.Context(), Job{Code: spawnTree + "time.sleep(300)\n", Timeout: time.Second},
		Options{Dir: t.TempDir(), Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS})
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) {
		t.Skipf("namespaces not allowed here: %v", err)
	}
	if err != nil || !res.TimedOut {
		t.Fatalf("err %v, result %+v", err, res)
	}
	// The pids the snippet saw are its namespace's; check our own tree.
	if kids, err := childrenOf(os.Getpid()); err != nil || len(kids) != 0 {
		t.Errorf("processes left under the runner: %v (%v)", kids, err)
	}
}

// TestRunnerDeathKillsChild kills a runner process mid-run and checks that
// its child dies too.
func TestRunnerDeathKillsChild(t *testing.T) {
	if dir := os.Getenv("SANDBOX_PDEATH_HELPER"); dir != "" {
		Run(context.Background(), Job{Code: "import os, time\nopen('pid', 'w').write(str(os.getpid()))\ntime.sleep(60)\n", Timeout: time.Minute}, Options{Dir: dir})
		return
	}
	dir := t.TempDir()
	helper := osexec.Command(os.Args[0], "-test.run=^TestRunnerDeathKillsChild$")
	// The killed helper cannot remove its snippet file; keep it in ours.
	helper.Env = append(os.Environ(), "SANDBOX_PDEATH_HELPER="+dir, "TMPDIR="+t.TempDir())
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	for range 100 {
		b, _ := os.ReadFile(dir + "/pid")
		if pid, _ = strconv.Atoi(string(b)); pid != 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	helper.Process.Kill()
	helper.Wait()
	if pid == 0 {
		t.Fatal("the helper's snippet never started")
	}
	for range 100 {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return // gone, or a zombie waiting for its new parent
		}
		time.Sleep(20 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	t.Errorf("the child %d outlived its runner", pid)
}

// TestWeakenKillLeaderOnly shows that the tree kill is what stops a setsid()
// grandchild: the same snippet's grandchild outlives the deadline only when
// the weakened mode is on (verify's negative test relies on that).
func TestWeakenKillLeaderOnly(t *testing.T) {
	const code = `import os, sys, time
if os.fork() == 0:
    os.setsid()
    time.sleep(1.5)
    print("survived the deadline", flush=True)
    os._exit(0)
time.sleep(300)
`
	tests := []struct {
		name         string
		weakened     bool
		wantSurvivor bool
	}{
		{name: "tree kill", weakened: false, wantSurvivor: false},
		{name: "leader only", weakened: true, wantSurvivor: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, Job{Code: code, Timeout: time.Second}, Options{WeakenKillLeaderOnly: tt.weakened})
			if !res.TimedOut {
				t.Fatalf("timed_out = false; result %+v", res)
			}
			if got := strings.Contains(res.Stdout, "survived"); got != tt.wantSurvivor {
				t.Errorf("grandchild survived = %v, want %v (stdout %q)", got, tt.wantSurvivor, res.Stdout)
			}
		})
	}
}

// pid1Env marks the test binary started as its PID namespace's init.
const pid1Env = "SANDBOX_EXEC_TEST_PID1"

// asPodInit runs body in this test binary started again as PID 1 of a new
// PID and mount namespace with a /proc of its own, as the runner is in a
// pod. name is the calling test's.
func asPodInit(t *testing.T, name string, body func(t *testing.T)) {
	t.Helper()
	if os.Getenv(pid1Env) == "1" {
		if os.Getpid() != 1 {
			t.Fatalf("pid %d, want 1", os.Getpid())
		}
		// A sweep of an init reads /proc: it must be this namespace's.
		if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("proc", "/proc", "proc", 0, ""); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile("/proc/1/cmdline"); !strings.Contains(string(b), os.Args[0]) {
			t.Fatalf("/proc/1 is %q, not this process", b)
		}
		body(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("a PID namespace needs root")
	}
	if _, err := findPython("", nil); err != nil {
		t.Skip(err)
	}
	cmd := osexec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), pid1Env+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	t.Logf("as PID 1:\n%s", out)
	if err != nil || !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("as PID 1: %v", err)
	}
}

// sleepers forks n processes that wait for ever, writes their pids to a
// file "forked", then waits too.
const sleepers = `import os, time
pids = []
for _ in range(%d):
    pid = os.fork()
    if pid == 0:
        time.sleep(300)
        os._exit(0)
    pids.append(pid)
with open("forked.tmp", "w") as f:
    f.write(" ".join(map(str, pids)))
os.rename("forked.tmp", "forked")
print("forked", flush=True)
time.sleep(300)
`

// TestKilledRunDoesNotHoldTheAnswer: in a pod, a timed-out run whose
// killed processes cannot exit yet is still answered within deathGrace of
// its timeout. On a busy node that is a thousand processes of a fork bomb
// in SCHED_IDLE, each waiting for the CPU to exit; here the snippet's
// children are put in a frozen cgroup v1 freezer, where a SIGKILL waits for
// the thaw. The control is that they indeed were still there when Run
// returned, so the answer did not wait for them.
func TestKilledRunDoesNotHoldTheAnswer(t *testing.T) {
	freezer := "/sys/fs/cgroup/freezer"
	if _, err := os.Stat(freezer + "/cgroup.procs"); err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and the cgroup v1 freezer (v2's lets SIGKILL through)")
	}
	asPodInit(t, "TestKilledRunDoesNotHoldTheAnswer", func(t *testing.T) {
		dir := t.TempDir()
		cg := filepath.Join(freezer, "sandbox-exec-test-"+strconv.Itoa(os.Getppid())+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
		if err := os.Mkdir(cg, 0o755); err != nil {
			t.Fatal(err)
		}
		thaw := func() { _ = os.WriteFile(cg+"/freezer.state", []byte("THAWED"), 0o644) }
		defer func() {
			thaw()
			_, _ = reapAll(context.Background())
			for range 100 {
				if os.Remove(cg) == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
		frozen := make(chan error, 1)
		go func() {
			for {
				b, err := os.ReadFile(dir + "/forked")
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				for _, pid := range strings.Fields(string(b)) {
					if err := os.WriteFile(cg+"/cgroup.procs", []byte(pid), 0o644); err != nil {
						frozen <- err
						return
					}
				}
				frozen <- os.WriteFile(cg+"/freezer.state", []byte("FROZEN"), 0o644)
				return
			}
		}()
		const timeout = 3 * time.Second
		start := time.Now()
		res, err := Run(context.Background(), Job{Code: fmt.Sprintf(sleepers, 20), Timeout: timeout},
			Options{Dir: dir, Nice: 19, IdleCPU: true})
		took := time.Since(start)
		left, werr := syscall.Wait4(-1, nil, syscall.WNOHANG|syscall.WALL, nil)
		if err := <-frozen; err != nil {
			t.Fatalf("freeze the snippet's children: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("answered after %s: %+v", took, res)
		if !res.TimedOut || !strings.HasPrefix(res.Stdout, "forked") {
			t.Errorf("want a timed-out run that printed \"forked\": %+v", res)
		}
		if limit := timeout + deathGrace + time.Second; took > limit {
			t.Errorf("answered after %s, beyond the timeout and the grace (%s)", took, limit)
		}
		if left == 0 && werr == nil {
			t.Logf("control: the killed children were still there when Run returned")
		} else {
			t.Errorf("control: the killed children had gone when Run returned (wait4: %d, %v), so the freezer held nothing", left, werr)
		}
	})
}

// TestKilledInterpreterBeforeItsJobDoesNotHoldTheAnswer: in a pod, a
// pre-started python3 killed at the deadline before it took its job (here:
// frozen in a cgroup v1 freezer while it waits, so that it cannot read the
// code, and its SIGKILL waits for the thaw) holds its end of the job's
// socket until it exits. The answer still comes within deathGrace of the
// timeout: it does not wait for the socket to end.
func TestKilledInterpreterBeforeItsJobDoesNotHoldTheAnswer(t *testing.T) {
	freezer := "/sys/fs/cgroup/freezer"
	if _, err := os.Stat(freezer + "/cgroup.procs"); err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and the cgroup v1 freezer (v2's lets SIGKILL through)")
	}
	asPodInit(t, "TestKilledInterpreterBeforeItsJobDoesNotHoldTheAnswer", func(t *testing.T) {
		cg := filepath.Join(freezer, "sandbox-exec-test-"+strconv.Itoa(os.Getppid())+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
		if err := os.Mkdir(cg, 0o755); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = os.WriteFile(cg+"/freezer.state", []byte("THAWED"), 0o644)
			_, _ = reapAll(context.Background())
			for range 100 {
				if os.Remove(cg) == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
		p, err := Prestart(Options{Dir: t.TempDir(), Nice: 19, IdleCPU: true})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		select {
		case <-p.Ready():
		case <-time.After(20 * time.Second):
			t.Fatal("not ready after 20s")
		}
		if err := os.WriteFile(cg+"/cgroup.procs", []byte(strconv.Itoa(p.Pid())), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cg+"/freezer.state", []byte("FROZEN"), 0o644); err != nil {
			t.Fatal(err)
		}
		const timeout = time.Second
		type answer struct {
			res wire.Result
			err error
		}
		answered := make(chan answer, 1)
		start := time.Now()
		go func() {
			res, err := p.Run(context.Background(), Job{Code: "print('ran')", Timeout: timeout})
			answered <- answer{res, err}
		}()
		limit := timeout + deathGrace + time.Second
		select {
		case a := <-answered:
			took := time.Since(start)
			t.Logf("answered after %s: %+v, %v", took, a.res, a.err)
			if a.err != nil || !a.res.TimedOut || strings.Contains(a.res.Stdout, "ran") {
				t.Errorf("want a timed-out run that ran nothing: %+v, %v", a.res, a.err)
			}
			if took > limit {
				t.Errorf("answered after %s, beyond the timeout and the grace (%s)", took, limit)
			}
		case <-time.After(limit + 5*time.Second):
			t.Fatalf("no answer %s after the start: the frozen interpreter holds it", limit+5*time.Second)
		}
		if err := syscall.Kill(p.Pid(), 0); err != nil {
			t.Errorf("control: the killed interpreter had gone when Run returned (kill 0: %v), so the freezer held nothing", err)
		}
	})
}
