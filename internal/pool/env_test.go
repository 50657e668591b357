package pool

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"

	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/wire"
)

const testNS = "sandbox"

// env is a pool on a fake clientset, with an httptest server as every pod's
// runner (the pods' IP is 127.0.0.1 and the pool's runner port is the test
// server's) and a stand-in kubelet that marks new pods Ready at creation
// unless autoReady is off.
type env struct {
	t      testing.TB
	cs     *fake.Clientset
	pool   *Pool
	runner *httptest.Server

	autoReady atomic.Bool
	handler   atomic.Value // http.HandlerFunc the runner uses

	creates atomic.Int32
	patches atomic.Int32
	// jobs counts requests that reached the runner; earlyPatches the pod
	// patches (claim records) that came before their job had: there must
	// be none, the claim's record is written after the job is handed over.
	jobs         atomic.Int32
	earlyPatches atomic.Int32

	cancel context.CancelFunc
	done   chan error
}

type envOpt func(*Options)

func newEnv(t testing.TB, objs []runtime.Object, opts ...envOpt) *env {
	t.Helper()
	e := &env{t: t, cs: fake.NewSimpleClientset(objs...)}
	e.autoReady.Store(true)
	e.handler.Store(http.HandlerFunc(okRunner))
	e.runner = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/execute" {
			e.jobs.Add(1)
		}
		e.handler.Load().(http.HandlerFunc)(w, r)
	}))
	t.Cleanup(e.runner.Close)
	_, portStr, _ := net.SplitHostPort(e.runner.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)

	e.cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		pod.CreationTimestamp = metav1.Now()
		pod.UID = types.UID("uid-" + pod.Name)
		if e.autoReady.Load() {
			setReady(pod)
		}
		e.creates.Add(1)
		return false, nil, nil
	})
	e.cs.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		n := e.patches.Add(1)
		// The job was written to the runner's socket before the record
		// starts; give the test server a moment to count it.
		deadline := time.Now().Add(time.Second)
		for e.jobs.Load() < n && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if e.jobs.Load() < n {
			e.earlyPatches.Add(1)
		}
		return false, nil, nil
	})
	t.Cleanup(func() {
		if n := e.earlyPatches.Load(); n > 0 {
			t.Errorf("%d pod patches came before their job reached the runner: a claim must be recorded after it", n)
		}
	})

	o := Options{
		Client:    e.cs,
		Namespace: testNS,
		Pod: kube.PodOptions{
			Image:      "sandbox:dev",
			RunnerPort: int32(port),
			Owner:      kube.Owner{Name: "serve-0", UID: "serve-0-uid"},
		},
		Size:   3,
		Wait:   5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	for _, f := range opts {
		f(&o)
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	e.pool = p
	return e
}

// start runs the pool until the test ends (or stop is called).
func (e *env) start() *env {
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done = cancel, make(chan error, 1)
	go func() { e.done <- e.pool.Run(ctx) }()
	e.t.Cleanup(func() { e.stop() })
	return e
}

// stop shuts the pool down and waits for Run to return.
func (e *env) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	select {
	case err := <-e.done:
		if err != nil {
			e.t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		e.t.Fatal("Run did not return after cancel")
	}
	e.cancel = nil
}

func (e *env) setRunner(h http.HandlerFunc) { e.handler.Store(h) }

// pods lists the pods in the API (not the informer).
func (e *env) pods() []corev1.Pod {
	list, err := e.cs.CoreV1().Pods(testNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

// warm counts live, unclaimed pods in the API, and how many are Ready.
func (e *env) warm() (live, ready int) {
	for _, p := range e.pods() {
		if !kube.IsClaimed(&p) && !kube.IsFinished(&p) && p.DeletionTimestamp == nil {
			live++
			if kube.IsReady(&p) {
				ready++
			}
		}
	}
	return live, ready
}

// eventually fails the test unless cond holds within a generous deadline.
// It checks correctness, not speed.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitWarm waits until the pool holds n Ready, unclaimed pods.
func (e *env) waitWarm(n int) {
	e.t.Helper()
	e.eventually("warm pool of "+strconv.Itoa(n), func() bool {
		_, ready := e.warm()
		e.pool.mu.Lock()
		cached := e.pool.readyCountLocked()
		e.pool.mu.Unlock()
		return ready == n && cached == n
	})
}

// updatePod changes a pod's status (as the kubelet would) through the API.
func (e *env) updatePod(name string, f func(*corev1.Pod)) {
	e.t.Helper()
	pod, err := e.cs.CoreV1().Pods(testNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get pod %s: %v", name, err)
	}
	f(pod)
	if _, err := e.cs.CoreV1().Pods(testNS).UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		e.t.Fatalf("update pod %s: %v", name, err)
	}
}

func setReady(pod *corev1.Pod) {
	now := metav1.Now()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = "127.0.0.1"
	pod.Status.StartTime = &now
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: kube.RunnerContainer, Ready: true,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
	}}
}

func setTerminated(pod *corev1.Pod, reason string, code int32) {
	pod.Status.Phase = corev1.PodFailed
	if code == 0 {
		pod.Status.Phase = corev1.PodSucceeded // restartPolicy Never
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name:  kube.RunnerContainer,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: reason, ExitCode: code}},
	}}
}

// okRunner answers like `sandbox run` after a successful job.
func okRunner(w http.ResponseWriter, r *http.Request) {
	var req wire.ExecuteRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":"bad json"}`, http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(wire.Result{Process: wire.Process{Stdout: "ran: " + req.Code, DurationMS: 7}})
}

// breakConn drops the runner's connection without an answer, as a pod that
// dies mid-run does.
func breakConn(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("no hijacker")
	}
	c, _, err := hj.Hijack()
	if err != nil {
		panic(err)
	}
	_ = c.Close()
}

// claimedPods lists the pods the pool has handed out and not yet released:
// the one a runner request was meant for (the test runner serves every pod).
// The pool's memory is the claim; the label comes a moment later.
func (e *env) claimedPods() []string {
	e.pool.mu.Lock()
	defer e.pool.mu.Unlock()
	var names []string
	for name := range e.pool.inUse {
		names = append(names, name)
	}
	return names
}

// claimRecordedPods lists the pods whose claim is recorded on them and that are
// not going away.
func (e *env) claimRecordedPods() []string {
	var names []string
	for _, p := range e.pods() {
		if kube.IsClaimed(&p) && p.DeletionTimestamp == nil {
			names = append(names, p.Name)
		}
	}
	return names
}

func (e *env) execute(code string) (wire.Result, error) {
	return e.pool.Execute(context.Background(), exec.Job{Code: code, Timeout: 5 * time.Second})
}

// refusingDialer fails the first n dials as a runner that is not listening.
func refusingDialer(n int32) (DialFunc, *atomic.Int32) {
	var calls atomic.Int32
	d := &net.Dialer{Timeout: time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if calls.Add(1) <= n {
			return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
		}
		return d.DialContext(ctx, network, addr)
	}, &calls
}

func typesUID(s string) types.UID { return types.UID(s) }
