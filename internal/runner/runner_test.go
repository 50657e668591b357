//go:build linux

package runner

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/wire"
)

// start runs a Server on 127.0.0.1:0, waits until it is ready, and returns
// its base URL and the channel Run's error arrives on.
func start(t *testing.T) (string, <-chan error) {
	t.Helper()
	_, url, ran := startWith(t, Options{})
	waitReady(t, url)
	return url, ran
}

// startWith runs a Server with opts on 127.0.0.1:0 without waiting for it.
func startWith(t *testing.T, opts Options) (*Server, string, <-chan error) {
	t.Helper()
	opts.Listen, opts.SandboxID, opts.MaxTimeout = "127.0.0.1:0", "pod-1", 30*time.Second
	if opts.Exec.Dir == "" {
		opts.Exec.Dir = t.TempDir()
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- s.Run(t.Context()) }()
	return s, "http://" + s.Addr().String(), ran
}

// waitReady polls /readyz until the runner's python3 waits for its job.
func waitReady(t *testing.T, url string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if code, _ := do(t, "GET", url+"/readyz", ""); code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("runner not ready after 20s")
		}
	}
}

// send sends a request to the runner and returns its answer, headers and
// all; the body is closed when the test ends.
func send(t *testing.T, method, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// postJob posts a job to the runner.
func postJob(t *testing.T, url, body string) *http.Response {
	t.Helper()
	return send(t, "POST", url+"/v1/execute", body)
}

func do(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	resp := send(t, method, url, body)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestOneJobThenExit(t *testing.T) {
	url, ran := start(t)
	if code, _ := do(t, "GET", url+"/healthz", ""); code != 200 {
		t.Errorf("healthz = %d", code)
	}
	if code, _ := do(t, "GET", url+"/readyz", ""); code != 200 {
		t.Errorf("readyz before the job = %d, want 200", code)
	}
	// A bad request runs nothing and leaves the runner ready.
	if code, body := do(t, "POST", url+"/v1/execute", `{"code": "print(1)", "bogus": 1}`); code != 400 || !strings.Contains(body, "bogus") {
		t.Errorf("unknown field: %d %s", code, body)
	}
	if code, body := do(t, "POST", url+"/v1/execute", `{"code": "print(1)", "timeout_s": 45}`); code != 400 || !strings.Contains(body, "limit") {
		t.Errorf("timeout over the runner's limit: %d %s", code, body)
	}
	if code, body := do(t, "GET", url+"/v1/execute", ""); code != 405 || !json.Valid([]byte(body)) {
		t.Errorf("GET /v1/execute: %d %s", code, body)
	}

	code, body := do(t, "POST", url+"/v1/execute", `{"code": "print(6*7)", "timeout_s": 5, "files": [{"path": "a.txt", "content": "aGk=", "encoding": "base64"}]}`)
	var res wire.Result
	if err := json.Unmarshal([]byte(body), &res); code != 200 || err != nil {
		t.Fatalf("execute: %d %s (%v)", code, body, err)
	}
	if res.Stdout != "42\n" || res.ExitCode != 0 || res.SandboxID != "pod-1" {
		t.Errorf("result = %+v", res)
	}

	select {
	case err := <-ran:
		if err != nil {
			t.Errorf("Run = %v, want nil after the job", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the runner did not exit after its job")
	}
}

// TestWaitedSnippetYieldsToItsRunner: the runner's python3, started before
// its job and waiting for it, runs the job as a fresh run would: nice 19,
// SCHED_IDLE, the OOM killer's first choice and 1,024 open files at most.
func TestWaitedSnippetYieldsToItsRunner(t *testing.T) {
	url, _ := start(t)
	time.Sleep(100 * time.Millisecond) // it waits, as in a warm pod
	code, body := do(t, "POST", url+"/v1/execute", `{"code": "import os, resource as r\nprint(os.nice(0), os.sched_getscheduler(0) == os.SCHED_IDLE, open('/proc/self/oom_score_adj').read().strip(), *r.getrlimit(r.RLIMIT_NOFILE))", "timeout_s": 5}`)
	var res wire.Result
	if err := json.Unmarshal([]byte(body), &res); code != 200 || err != nil {
		t.Fatalf("execute: %d %s (%v)", code, body, err)
	}
	if want := strconv.Itoa(snippetNice) + " True 1000 1024 1024\n"; res.Stdout != want {
		t.Errorf("nice, SCHED_IDLE, oom_score_adj and RLIMIT_NOFILE = %q, stderr %q; want %q", res.Stdout, res.Stderr, want)
	}
}

func TestSecondJobConflicts(t *testing.T) {
	url, ran := start(t)
	first := make(chan int, 1)
	go func() {
		resp, err := http.Post(url+"/v1/execute", "application/json", strings.NewReader(`{"code": "import time; time.sleep(1)"}`))
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	// Wait until the first job is taken.
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, _ := do(t, "GET", url+"/readyz", "")
		if code == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the runner never took the first job (readyz %d)", code)
		}
		time.Sleep(10 * time.Millisecond)
	}
	code, body := do(t, "POST", url+"/v1/execute", `{"code": "print(2)"}`)
	var eb wire.ErrorBody
	if code != 409 || json.Unmarshal([]byte(body), &eb) != nil || eb.Error == "" {
		t.Errorf("second job: %d %s, want 409 with an error", code, body)
	}
	if code := <-first; code != 200 {
		t.Errorf("first job = %d", code)
	}
	if err := <-ran; err != nil {
		t.Errorf("Run = %v", err)
	}
}

func TestStopsWithContext(t *testing.T) {
	s, err := New(Options{Listen: "127.0.0.1:0", Exec: exec.Options{Dir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Run(ctx); err == nil {
		t.Error("Run = nil after ctx ended without a job, want an error")
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

// runErr waits for Run's error.
func runErr(t *testing.T, ran <-chan error) error {
	t.Helper()
	select {
	case err := <-ran:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("the runner did not stop")
		return nil
	}
}

// TestInterpreterNotReadyInTime: a python3 that never waits for its job
// keeps the runner unready; at ReadyTimeout it is killed, a job waiting for
// it is refused with 503, and the runner ends with an error naming the wait.
func TestInterpreterNotReadyInTime(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	python := fakePython(t, "echo $$ > "+pidFile+"\nexec sleep 300\n")
	_, url, ran := startWith(t, Options{Exec: exec.Options{Python: python}, ReadyTimeout: 1500 * time.Millisecond})
	if code, body := do(t, "GET", url+"/readyz", ""); code != 503 || !strings.Contains(body, "starting") {
		t.Errorf("readyz while python3 starts: %d %s, want 503", code, body)
	}
	code, body := do(t, "POST", url+"/v1/execute", `{"code": "print(1)"}`)
	if code != 503 || !strings.Contains(body, "nothing ran") {
		t.Errorf("job to an interpreter that never got ready: %d %s, want 503 saying nothing ran", code, body)
	}
	if err := runErr(t, ran); err == nil || !strings.Contains(err.Error(), "not waiting for the job 1.5s after its start") {
		t.Errorf("Run = %v, want the wait named", err)
	}
	assertGone(t, pidFile)
}

// TestInterpreterDiesBeforeJob: a python3 that exits at its start ends the
// runner with its exit status and what it wrote.
func TestInterpreterDiesBeforeJob(t *testing.T) {
	python := fakePython(t, "echo 'Fatal Python error: no encodings' >&2\nexit 3\n")
	_, url, ran := startWith(t, Options{Exec: exec.Options{Python: python}})
	err := runErr(t, ran)
	if err == nil || !errors.Is(err, exec.ErrNotTaken) || !strings.Contains(err.Error(), "exit status 3") ||
		!strings.Contains(err.Error(), "Fatal Python error: no encodings") {
		t.Errorf("Run = %v, want ErrNotTaken with the exit status and stderr", err)
	}
	if _, err := http.Get(url + "/readyz"); err == nil {
		t.Error("the runner still serves after its python3 died")
	}
}

// TestInterpreterKilledWhileWaiting: the real python3, killed while it waits,
// ends the runner; readyz says so in the meantime.
func TestInterpreterKilledWhileWaiting(t *testing.T) {
	s, url, ran := startWith(t, Options{})
	waitReady(t, url)
	if err := syscall.Kill(s.interp.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := runErr(t, ran)
	if !errors.Is(err, exec.ErrNotTaken) || !strings.Contains(err.Error(), "signal: killed") {
		t.Errorf("Run = %v, want ErrNotTaken naming the kill", err)
	}
}

// TestInterpreterDiesWithTheJob: a python3 that reads the job but ends
// before it takes it gets the job refused with 503: nothing of it ran, so
// the pool may send it to another pod.
func TestInterpreterDiesWithTheJob(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	python := fakePython(t, "printf r >&3\ncat <&3 >/dev/null\nexit 7\n")
	_, url, ran := startWith(t, Options{Exec: exec.Options{Python: python}})
	waitReady(t, url)
	code, body := do(t, "POST", url+"/v1/execute", `{"code": "open('`+marker+`', 'w')"}`)
	if code != 503 || !strings.Contains(body, "nothing ran") || !strings.Contains(body, "exit status 7") {
		t.Errorf("job: %d %s, want 503 saying nothing ran and how python3 ended", code, body)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the job ran")
	}
	if err := runErr(t, ran); err != nil {
		t.Errorf("Run = %v, want nil: the job was answered", err)
	}
}

// assertGone checks that the process whose pid is in file has been reaped.
func assertGone(t *testing.T, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("no pid: %v", err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("process %d still there (kill 0: %v)", pid, err)
	}
}

// TestJobTimingHeader: the runner says in Server-Timing how long its handler
// took for the job, which serve passes on (make bench-kind reads it).
func TestJobTimingHeader(t *testing.T) {
	url, _ := start(t)
	resp := postJob(t, url, `{"code": "import time; time.sleep(0.05)"}`)
	var res wire.Result
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || resp.StatusCode != 200 {
		t.Fatalf("execute: %d (%v)", resp.StatusCode, err)
	}
	ms, ok := api.ParseServerTiming(resp.Header.Get(api.ServerTiming))[api.TimingRunnerJob]
	if !ok || ms < 50 || ms < float64(res.DurationMS) {
		t.Errorf("Server-Timing %q: want %s of at least the run's %d ms (and the 50 ms sleep)", resp.Header.Get(api.ServerTiming), api.TimingRunnerJob, res.DurationMS)
	}
}
