//go:build linux

package runner

import (
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/internal/seal"
)

// startSealed runs a Server that must prove target cut, with a resolver on
// a free loopback port.
func startSealed(t *testing.T, target string, unproven bool) (*Server, string, <-chan error) {
	t.Helper()
	return startWith(t, Options{SealTargets: []seal.Target{{Kind: seal.TCP, Addr: target}}, Resolver: "127.0.0.1:0",
		WeakenUnprovenReady: unproven})
}

// TestNotReadyOnAnOpenNetwork: while the target answers (the positive
// control: the path is open), the runner is not Ready, says why, and
// refuses the job without taking it; once the path is cut it is Ready and
// runs the job.
func TestNotReadyOnAnOpenNetwork(t *testing.T) {
	open, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	_, url, ran := startSealed(t, open.Addr().String(), false)

	start := time.Now()
	code, body := do(t, "GET", url+"/readyz", "")
	if code != 503 || !strings.Contains(body, api.NotSealed) || !strings.Contains(body, "connected") {
		t.Fatalf("readyz on an open network: %d %s", code, body)
	}
	if took := time.Since(start); took < seal.ReadyWait/2 || took > seal.ReadyWait+500*time.Millisecond {
		t.Errorf("an unproven readyz answered after %s, want about %s (held for the proof)", took, seal.ReadyWait)
	}
	code, body = do(t, "POST", url+"/v1/execute", `{"code": "print(1)"}`)
	if code != 503 || !strings.Contains(body, api.NotSealed) {
		t.Fatalf("job on an open network: %d %s, want 503 %q", code, body, api.NotSealed)
	}
	var st api.SealState
	_, body = do(t, "GET", url+"/seal", "")
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.Sealed || !st.Checked || !strings.Contains(st.Evidence, "connected") {
		t.Errorf("/seal = %s (%v)", body, err)
	}

	open.Close() // the policy comes into force: connections are refused
	deadline := time.Now().Add(5 * time.Second)
	for {
		if code, _ := do(t, "GET", url+"/readyz", ""); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not Ready 5 s after the path was cut")
		}
	}
	code, body = do(t, "POST", url+"/v1/execute", `{"code": "print(6*7)"}`)
	if code != 200 || !strings.Contains(body, `"stdout":"42\n"`) {
		t.Fatalf("job after the proof: %d %s", code, body)
	}
	if err := <-ran; err != nil {
		t.Errorf("Run = %v", err)
	}
}

// TestUnprovenReadyWeakening: the weakened runner is Ready and runs its job
// on a network it never proved sealed.
func TestUnprovenReadyWeakening(t *testing.T) {
	open, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	_, url, ran := startSealed(t, open.Addr().String(), true)
	waitReady(t, url) // its python3 waits: the one thing it still waits for
	if code, body := do(t, "POST", url+"/v1/execute", `{"code": "print(1)"}`); code != 200 {
		t.Fatalf("weakened job: %d %s", code, body)
	}
	<-ran
}

// TestSealedNotReadyUntilPythonWaits: a proven seal alone does not make the
// runner Ready; its python3 must wait for the job too.
func TestSealedNotReadyUntilPythonWaits(t *testing.T) {
	python := fakePython(t, "exec sleep 300\n")
	_, url, ran := startWith(t, Options{Exec: exec.Options{Python: python}, ReadyTimeout: 1500 * time.Millisecond,
		SealTargets: []seal.Target{{Kind: seal.TCP, Addr: closedAddr(t)}}})
	if code, body := do(t, "GET", url+"/readyz", ""); code != 503 || !strings.Contains(body, "starting") {
		t.Errorf("readyz, sealed, python3 not waiting: %d %s, want 503 saying python3 is starting", code, body)
	}
	if err := runErr(t, ran); err == nil || !strings.Contains(err.Error(), "not waiting for the job") {
		t.Errorf("Run = %v, want the wait named", err)
	}
}

// TestRunnerResolver: the runner answers DNS while it waits and while its
// job runs, and releases the port when it exits.
func TestRunnerResolver(t *testing.T) {
	s, url, ran := startSealed(t, closedAddr(t), false)
	addr := s.ResolverAddr()
	q := new(dns.Msg)
	q.SetQuestion("c2VjcmV0.exfil.sandbox.test.", dns.TypeA)
	if r, err := dns.Exchange(q, addr); err != nil || r.Rcode != dns.RcodeNameError {
		t.Fatalf("query before the job: %v %v", r, err)
	}
	// As the pool does: the job only once the runner is Ready.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if code, _ := do(t, "GET", url+"/readyz", ""); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not Ready within 5 s with its target cut")
		}
	}
	code, body := do(t, "POST", url+"/v1/execute", `{"code": "print(1)"}`)
	if code != 200 {
		t.Fatalf("job: %d %s", code, body)
	}
	if err := <-ran; err != nil {
		t.Fatalf("Run = %v", err)
	}
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("the resolver's port is still held after Run: %v", err)
	}
	pc.Close()
}

func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

// TestGivesUpUnproven: a runner that cannot prove its seal ends, after
// GiveUp and without a job, with the evidence in its error: the pod's
// termination message, where serve reads why.
func TestGivesUpUnproven(t *testing.T) {
	open, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	s, err := New(Options{Listen: "127.0.0.1:0", Exec: exec.Options{Dir: t.TempDir()},
		SealTargets: []seal.Target{{Kind: seal.TCP, Addr: open.Addr().String()}}, GiveUp: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = s.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), api.NotSealed) || !strings.Contains(err.Error(), "connected") {
		t.Fatalf("Run = %v, want the runner to give up naming the open path", err)
	}
	if took := time.Since(start); took < 1500*time.Millisecond || took > 5*time.Second {
		t.Errorf("gave up after %s, want about 1.5 s", took)
	}
}

// TestPodStartupTiming: the job's answer says when the runner's python3
// waited, its seal was proven and it was first Ready, from its own start,
// and how long it then stayed warm; a runner with nothing to prove has no
// pod_sealed part.
func TestPodStartupTiming(t *testing.T) {
	timings := func(url string) map[string]float64 {
		t.Helper()
		waitReady(t, url)
		time.Sleep(40 * time.Millisecond)
		resp := postJob(t, url, `{"code": "print(1)"}`)
		return api.ParseServerTiming(resp.Header.Get(api.ServerTiming))
	}
	_, url, ran := startSealed(t, closedAddr(t), false)
	got := timings(url)
	<-ran
	py, sealed, ready, warm := got[api.TimingPodPython], got[api.TimingPodSealed], got[api.TimingPodReady], got[api.TimingPodWarm]
	if py <= 0 || sealed <= 0 || ready < max(py, sealed) || warm < 40 {
		t.Errorf("timing %v: want python3 and the seal before the first Ready, and at least 40 ms warm", got)
	}

	url, _ = start(t)
	got = timings(url)
	if _, ok := got[api.TimingPodSealed]; ok || got[api.TimingPodReady] < got[api.TimingPodPython] || got[api.TimingPodPython] <= 0 {
		t.Errorf("timing without seal targets %v: want python3's wait and the first Ready, no seal", got)
	}
}
