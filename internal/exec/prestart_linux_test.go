package exec

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// prestart starts an interpreter in a fresh directory and closes it at the
// end of the test.
func prestart(t *testing.T, opts Options) *Interp {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	p, err := Prestart(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// waitFor fails the test unless ch closes within 20 s.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: not within 20s", what)
	}
}

// TestPrestartWaitsUnderItsLimits: while it waits, the interpreter already
// has every limit, its priority, its scheduling class and its OOM score, in
// a group of its own, asleep; Close kills and reaps it.
func TestPrestartWaitsUnderItsLimits(t *testing.T) {
	p := prestart(t, Options{MaxProcs: 77, MaxFileSize: 1 << 20, MemoryLimit: 1 << 30, Nice: 7, IdleCPU: true})
	waitFor(t, p.Ready(), "ready")
	pid := strconv.Itoa(p.Pid())
	limits, err := os.ReadFile("/proc/" + pid + "/limits")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Max processes             77                   77",
		"Max file size             1048576              1048576",
		"Max core file size        0                    0",
		"Max address space         1073741824           1073741824",
		"Max open files            1024                 1024",
	} {
		if !strings.Contains(string(limits), want) {
			t.Errorf("limits lack %q:\n%s", want, limits)
		}
	}
	if b, _ := os.ReadFile("/proc/" + pid + "/oom_score_adj"); strings.TrimSpace(string(b)) != "1000" {
		t.Errorf("oom_score_adj = %q, want 1000", b)
	}
	// state, ppid, pgrp, ..., nice, ..., policy (fields 3, 4, 5, 19 and 41
	// of stat(5)); it runs a moment after it says it is ready, into its read.
	var f []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		stat, _ := os.ReadFile("/proc/" + pid + "/stat")
		if f = strings.Fields(string(stat)[strings.LastIndexByte(string(stat), ')')+2:]); f[0] == "S" {
			break
		}
	}
	const schedIdle = "5" // SCHED_IDLE, <linux/sched.h>
	if f[0] != "S" || f[1] != strconv.Itoa(os.Getpid()) || f[2] != pid || f[16] != "7" || f[38] != schedIdle {
		t.Errorf("state %s ppid %s pgrp %s nice %s policy %s; want S (asleep), us, its own group, 7, %s (SCHED_IDLE)", f[0], f[1], f[2], f[16], f[38], schedIdle)
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close = %v, want nil for an interpreter that was waiting", err)
	}
	if err := syscall.Kill(p.Pid(), 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("interpreter still there after Close (kill 0: %v)", err)
	}
}

// TestPrestartKilledBeforeJob: an interpreter killed while it waits is Lost,
// and the job given to it afterwards fails with ErrNotTaken without writing
// a file.
func TestPrestartKilledBeforeJob(t *testing.T) {
	dir := t.TempDir()
	p := prestart(t, Options{Dir: dir})
	waitFor(t, p.Ready(), "ready")
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, p.Lost(), "lost")
	_, err := p.Run(t.Context(), Job{Code: "print(1)", Files: []File{{Path: "in.txt", Content: []byte("x")}}})
	if !errors.Is(err, ErrNotTaken) || !strings.Contains(err.Error(), "signal: killed") {
		t.Errorf("Run = %v, want ErrNotTaken naming the kill", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("files written for a job that could not run: %v", ents)
	}
}

// TestPrestartDiesAtStart: an interpreter that cannot start is Lost, and
// Close says how it ended and what it said.
func TestPrestartDiesAtStart(t *testing.T) {
	p := prestart(t, Options{Python: fakePython(t, "echo 'Fatal Python error: init_fs_encoding' >&2\nexit 1\n")})
	waitFor(t, p.Lost(), "lost")
	err := p.Close()
	if !errors.Is(err, ErrNotTaken) || !strings.Contains(err.Error(), "exit status 1") || !strings.Contains(err.Error(), "init_fs_encoding") {
		t.Errorf("Close = %v, want ErrNotTaken with the status and stderr", err)
	}
}

// TestPrestartDiesWithTheJob: an interpreter that reads the job but ends
// before it acknowledges has run none of it: ErrNotTaken, not a result.
func TestPrestartDiesWithTheJob(t *testing.T) {
	p := prestart(t, Options{Python: fakePython(t, "printf r >&3\ncat <&3 >/dev/null\necho 'it ran' \nexit 0\n")})
	waitFor(t, p.Ready(), "ready")
	res, err := p.Run(t.Context(), Job{Code: "print(1)", Timeout: 10 * time.Second})
	if !errors.Is(err, ErrNotTaken) || !strings.Contains(err.Error(), "exit status 0") {
		t.Errorf("Run = %+v, %v; want ErrNotTaken", res, err)
	}
}

// TestPrestartNeverTakesTheJob: an interpreter that never reads its job
// times out like any run, and dies with the run.
func TestPrestartNeverTakesTheJob(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	p := prestart(t, Options{Python: fakePython(t, "echo $$ > "+pidFile+"\nexec sleep 300\n")})
	res, err := p.Run(t.Context(), Job{Code: "print(1)", Timeout: time.Second})
	if err != nil || !res.TimedOut || res.ExitCode != -1 {
		t.Errorf("Run = %+v, %v; want a timeout", res, err)
	}
	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err := syscall.Kill(pid, 0); pid == 0 || !errors.Is(err, syscall.ESRCH) {
		t.Errorf("process %d still there (kill 0: %v)", pid, err)
	}
}

// TestPrestartedTimeoutKillsTree: a pre-started run keeps the timeout and the
// whole-tree kill, counted from the job, not from the start.
func TestPrestartedTimeoutKillsTree(t *testing.T) {
	dir := t.TempDir()
	p := prestart(t, Options{Dir: dir})
	waitFor(t, p.Ready(), "ready")
	time.Sleep(time.Second) // longer than half the timeout: it must not count
	res, err := p.Run(t.Context(), Job{Code: spawnTree + "time.sleep(300)\n", Timeout: 2 * time.Second})
	if err != nil || !res.TimedOut || res.ExitCode != -1 || !strings.HasPrefix(res.Stdout, "started\n") {
		t.Fatalf("Run = %+v, %v; want a timeout after the tree started", res, err)
	}
	if res.DurationMS < 1900 {
		t.Errorf("duration %d ms: the wait counted against the timeout", res.DurationMS)
	}
	assertDead(t, dir)
}

// TestPrestartOneJob: an interpreter runs one job; a second is refused
// without running.
func TestPrestartOneJob(t *testing.T) {
	p := prestart(t, Options{})
	res, err := p.Run(t.Context(), Job{Code: "print(1)"})
	if err != nil || res.Stdout != "1\n" {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if _, err := p.Run(t.Context(), Job{Code: "print(2)"}); err == nil {
		t.Error("a second job ran")
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close after the job = %v", err)
	}
}

// fakePython writes an executable script that stands in for python3 and
// returns its path; the preamble's arguments are ignored.
func fakePython(t *testing.T, script string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "python3")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}
