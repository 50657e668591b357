package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/weaken"
	"github.com/sandboxd/sandbox/wire"
)

func TestExecuteUsesWarmPodOnceAndRefills(t *testing.T) {
	e := newEnv(t, nil).start()
	e.waitWarm(3)
	before := map[string]bool{}
	for _, p := range e.pods() {
		before[p.Name] = true
		if p.Labels[kube.LabelOwner] != "serve-0" || len(p.OwnerReferences) != 1 || p.OwnerReferences[0].UID != "serve-0-uid" {
			t.Errorf("pod %s: owner label %q, ownerReferences %v", p.Name, p.Labels[kube.LabelOwner], p.OwnerReferences)
		}
	}

	res, err := e.execute("print(1)")
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "ran: print(1)" || !before[res.SandboxID] {
		t.Fatalf("result %+v: want the runner's answer from one of the warm pods %v", res, before)
	}
	// The used pod is deleted and a replacement brings the pool back to 3.
	e.eventually("used pod deleted", func() bool {
		_, err := e.cs.CoreV1().Pods(testNS).Get(context.Background(), res.SandboxID, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	e.waitWarm(3)
	if got := e.creates.Load(); got != 4 {
		t.Errorf("creates = %d, want 4 (3 warm + 1 replacement)", got)
	}
	if got := e.patches.Load(); got != 1 {
		t.Errorf("claim records = %d, want exactly one write per claim, after the job", got)
	}

	res2, err := e.execute("print(2)")
	if err != nil {
		t.Fatal(err)
	}
	if res2.SandboxID == res.SandboxID {
		t.Fatalf("pod %s used twice", res.SandboxID)
	}
}

// TestExpectationsPreventOverCreate runs reconcile passes while the informer
// shows nothing (it is not even started): only the target is created, and a
// forgotten expectation is retried after its TTL.
func TestExpectationsPreventOverCreate(t *testing.T) {
	e := newEnv(t, nil)
	for range 5 {
		e.pool.reconcile(context.Background())
	}
	if got := e.creates.Load(); got != 3 {
		t.Fatalf("creates after 5 passes with a silent informer = %d, want 3", got)
	}
	pl := e.pool.plan(time.Now().Add(expectationTTL + time.Second))
	if len(pl.create) != 3 {
		t.Fatalf("after the TTL the plan creates %d, want 3", len(pl.create))
	}
}

func TestNoOverCreateWhileStarting(t *testing.T) {
	e := newEnv(t, nil)
	e.autoReady.Store(false)
	e.start()
	e.eventually("3 pods created", func() bool { return len(e.pods()) == 3 })
	// Status churn on starting pods pokes the reconcile loop many times.
	for i := range 20 {
		for _, p := range e.pods() {
			e.updatePod(p.Name, func(p *corev1.Pod) { p.Status.Message = strings.Repeat("x", i) })
		}
	}
	for _, p := range e.pods() {
		e.updatePod(p.Name, setReady)
	}
	e.waitWarm(3)
	if got := e.creates.Load(); got != 3 {
		t.Fatalf("creates = %d, want 3", got)
	}
}

func TestConcurrentRequestsGetDistinctPods(t *testing.T) {
	e := newEnv(t, nil, func(o *Options) { o.Size = 4 }).start()
	e.waitWarm(4)
	const n = 8 // more than the pool: later ones wait for refills
	var wg sync.WaitGroup
	ids := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			res, err := e.execute("x")
			ids[i], errs[i] = res.SandboxID, err
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if seen[ids[i]] {
			t.Fatalf("pod %s served two requests", ids[i])
		}
		seen[ids[i]] = true
	}
}

func TestEmptyPoolWaitsThenNoCapacity(t *testing.T) {
	e := newEnv(t, nil, func(o *Options) { o.Wait = 200 * time.Millisecond })
	e.autoReady.Store(false)
	e.start()
	_, err := e.execute("x")
	var ae *api.Error
	if !errors.As(err, &ae) || ae != api.ErrNoCapacity {
		t.Fatalf("err = %v, want api.ErrNoCapacity", err)
	}
	if ae.Status != http.StatusServiceUnavailable || ae.RetryAfter == 0 {
		t.Fatalf("status %d retry-after %v", ae.Status, ae.RetryAfter)
	}
	if !e.pool.Ready() {
		t.Fatal("not Ready with an empty pool: an empty pool must not take serve out of its Service")
	}
}

func TestWaitingRequestGetsPodWhenReady(t *testing.T) {
	e := newEnv(t, nil)
	e.autoReady.Store(false)
	e.start()
	e.eventually("3 pods created", func() bool { return len(e.pods()) == 3 })
	type out struct {
		res wire.Result
		err error
	}
	got := make(chan out, 1)
	go func() {
		res, err := e.execute("x")
		got <- out{res, err}
	}()
	name := e.pods()[1].Name
	e.updatePod(name, setReady)
	o := <-got
	if o.err != nil || o.res.SandboxID != name {
		t.Fatalf("got %+v, %v; want a run in %s", o.res, o.err, name)
	}
}

func TestRefillAfterWarmPodDiesOrIsDeleted(t *testing.T) {
	e := newEnv(t, nil).start()
	e.waitWarm(3)
	pods := e.pods()

	e.updatePod(pods[0].Name, func(p *corev1.Pod) { setTerminated(p, "Error", 2) })
	e.eventually("dead warm pod deleted", func() bool {
		_, err := e.cs.CoreV1().Pods(testNS).Get(context.Background(), pods[0].Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	e.waitWarm(3)

	if err := e.cs.CoreV1().Pods(testNS).Delete(context.Background(), pods[1].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitWarm(3)
	if got := e.creates.Load(); got != 5 {
		t.Fatalf("creates = %d, want 5 (3 + one per lost pod)", got)
	}
}

func TestPodOOMKilledMidRun(t *testing.T) {
	e := newEnv(t, nil).start()
	e.waitWarm(3)
	e.setRunner(func(w http.ResponseWriter, r *http.Request) {
		// The kubelet reports the OOM kill; the connection dies with the pod.
		for _, name := range e.claimedPods() {
			e.updatePod(name, func(p *corev1.Pod) { setTerminated(p, "OOMKilled", 137) })
		}
		breakConn(w)
	})
	res, err := e.execute("x = ' ' * 10**10")
	if err != nil {
		t.Fatal(err)
	}
	if !res.OOMKilled || res.ExitCode != 137 || !strings.Contains(res.Stderr, "out of memory") || res.SandboxID == "" {
		t.Fatalf("result %+v: want oom_killed, exit 137, an out-of-memory line and the pod's id", res)
	}
	if got := testutil.ToFloat64(e.pool.m.podDeaths); got != 1 {
		t.Errorf("pod deaths = %v", got)
	}
}

func TestPodEvictedMidRun(t *testing.T) {
	e := newEnv(t, nil).start()
	e.waitWarm(3)
	e.setRunner(func(w http.ResponseWriter, r *http.Request) {
		for _, name := range e.claimedPods() {
			e.updatePod(name, func(p *corev1.Pod) {
				setTerminated(p, "Error", 137)
				p.Status.Reason, p.Status.Message = "Evicted", "The node was low on resource: memory."
			})
		}
		breakConn(w)
	})
	_, err := e.execute("x")
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status < 500 || !strings.Contains(ae.Msg, "evicted") || !strings.Contains(ae.Msg, "low on resource") {
		t.Fatalf("err = %#v, want a 5xx naming the eviction", err)
	}
}

func TestPodDeletedMidRun(t *testing.T) {
	e := newEnv(t, nil).start()
	e.waitWarm(3)
	e.setRunner(func(w http.ResponseWriter, r *http.Request) {
		for _, name := range e.claimedPods() {
			_ = e.cs.CoreV1().Pods(testNS).Delete(context.Background(), name, metav1.DeleteOptions{})
		}
		breakConn(w)
	})
	_, err := e.execute("x")
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status < 500 || !strings.Contains(ae.Msg, "deleted") {
		t.Fatalf("err = %#v, want a 5xx saying the pod was deleted", err)
	}
}

// TestRunnerDeathEndsTheRunAtOnce: a runner that dies while its connection
// stays open (a node gone silent, a kernel slow to reset) is answered as
// soon as the pod's status says so, not at the run's deadline. Without the
// watch this request would wait timeout_s + runSlack, 16 s, and the test
// would fail at its 5 s bound.
func TestRunnerDeathEndsTheRunAtOnce(t *testing.T) {
	e := newEnv(t, nil).start()
	e.waitWarm(3)
	e.setRunner(func(w http.ResponseWriter, r *http.Request) {
		for _, name := range e.claimedPods() {
			e.updatePod(name, func(p *corev1.Pod) { setTerminated(p, "Error", 2) })
		}
		// The connection stays open until the pool gives up on it. (The
		// server notices a closed connection only once the body is read.)
		io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
	})
	timeout := 1
	start := time.Now()
	_, err := e.pool.Execute(t.Context(), exec.Job{Code: "x", Timeout: time.Duration(timeout) * time.Second})
	took := time.Since(start)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusBadGateway || !strings.Contains(ae.Msg, "exited with code 2") {
		t.Fatalf("err = %#v, want a 502 naming the runner's exit", err)
	}
	if took > 5*time.Second {
		t.Fatalf("answered after %s: the pool waited for its deadline instead of the pod's status", took)
	}
}

// TestOverdueRunnerIsAnsweredFor: a runner that never answers its job (its
// pod starved of CPU) gets a timed-out answer from the pool answerGrace
// after the timeout, and its pod is deleted. With the kill-leader-only
// weakening the pool waits for the runner, as a naive service would: the
// control, whose runner answers late and is heard.
func TestOverdueRunnerIsAnsweredFor(t *testing.T) {
	const timeout = time.Second
	late := timeout + answerGrace + time.Second
	silent := func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
			return
		case <-time.After(late):
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"stdout":"late\n","exit_code":-1,"timed_out":true}`)
	}
	for _, weakened := range []bool{false, true} {
		t.Run(fmt.Sprintf("weakened=%v", weakened), func(t *testing.T) {
			e := newEnv(t, nil, func(o *Options) {
				if weakened {
					o.Pod.Weaken, _ = weaken.Parse([]string{string(weaken.KillLeaderOnly)}, false)
				}
			}).start()
			e.waitWarm(3)
			e.setRunner(silent)
			start := time.Now()
			res, err := e.pool.Execute(t.Context(), exec.Job{Code: "x", Timeout: timeout})
			took := time.Since(start)
			if err != nil {
				t.Fatalf("err = %v, want a result", err)
			}
			if weakened {
				if res.Stdout != "late\n" || took < late {
					t.Fatalf("after %s: %+v; want the weakened runner's own late answer", took, res)
				}
				return
			}
			if !res.TimedOut || res.ExitCode != -1 || !strings.HasPrefix(res.Stderr, exec.TimedOutLine(timeout)) || !strings.Contains(res.Stderr, "did not answer") {
				t.Fatalf("result %+v; want a timed-out answer that says the runner did not answer", res)
			}
			if took < timeout+answerGrace || took > late {
				t.Fatalf("answered after %s; want between %s and %s", took, timeout+answerGrace, late)
			}
			if got := testutil.ToFloat64(e.pool.m.overdue); got != 1 {
				t.Errorf("overdue counter = %v, want 1", got)
			}
			e.eventually("the overdue pod is deleted", func() bool {
				for _, p := range e.pods() {
					if p.Name == res.SandboxID {
						return false
					}
				}
				return true
			})
		})
	}
}

// TestCleanRunnerExitIsNotADeath: a runner exits 0 right after its answer;
// the watch must not cut a body still being read.
func TestCleanRunnerExitIsNotADeath(t *testing.T) {
	e := newEnv(t, nil).start()
	e.waitWarm(3)
	e.setRunner(func(w http.ResponseWriter, r *http.Request) {
		for _, name := range e.claimedPods() {
			e.updatePod(name, func(p *corev1.Pod) { setTerminated(p, "Completed", 0) })
		}
		time.Sleep(200 * time.Millisecond) // the informer sees the exit before the answer
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"stdout":"ok\n","exit_code":0}`)
	})
	res, err := e.execute("print('ok')")
	if err != nil || res.Stdout != "ok\n" {
		t.Fatalf("result %+v, err %v: want the runner's answer", res, err)
	}
}

// TestUnreachableRunnerThenEmptyPoolIs503: the one warm pod's runner
// refuses the job and no other pod gets Ready within the wait. Nothing ran,
// so the answer is the documented, retryable 503, not a 502.
func TestUnreachableRunnerThenEmptyPoolIs503(t *testing.T) {
	dial, _ := refusingDialer(1 << 30)
	e := newEnv(t, nil, func(o *Options) { o.Dialer = dial; o.Wait = 300 * time.Millisecond })
	e.autoReady.Store(false)
	e.start()
	e.eventually("3 pods created", func() bool { return len(e.pods()) == 3 })
	e.updatePod(e.pods()[0].Name, setReady)
	e.waitWarm(1)
	_, err := e.execute("x")
	var ae *api.Error
	if !errors.As(err, &ae) || ae != api.ErrNoCapacity {
		t.Fatalf("err = %v, want the documented 503 (api.ErrNoCapacity)", err)
	}
}

// TestRefusedRunnerIsTriedAgain: a runner refused for a moment (a policy
// engine rewriting its rules) gets the job on the next connection; the pod
// is not given up.
func TestRefusedRunnerIsTriedAgain(t *testing.T) {
	dial, calls := refusingDialer(2)
	e := newEnv(t, nil, func(o *Options) { o.Dialer = dial }).start()
	e.waitWarm(3)
	res, err := e.execute("x")
	if err != nil {
		t.Fatal(err)
	}
	// The claim record is written after the job is handed over, off the
	// request path, so it may land after the answer.
	e.eventually("the claim recorded", func() bool { return e.patches.Load() >= 1 })
	if calls.Load() != 3 || e.patches.Load() != 1 || res.SandboxID == "" {
		t.Fatalf("dials = %d, claims = %d, id %q: want 3 dials (two refused) to the one claimed pod",
			calls.Load(), e.patches.Load(), res.SandboxID)
	}
}

func TestUnreachableRunnerMovesToNextPod(t *testing.T) {
	dial, calls := refusingDialer(redials + 1)
	e := newEnv(t, nil, func(o *Options) { o.Dialer = dial }).start()
	e.waitWarm(3)
	res, err := e.execute("x")
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != redials+2 {
		t.Fatalf("dials = %d, want %d (every try of the first pod refused, one that worked)", calls.Load(), redials+2)
	}
	// Both claimed pods are deleted: the unreachable one and the used one.
	e.eventually("both claimed pods deleted", func() bool { return len(e.pods()) == 3 && len(e.claimRecordedPods()) == 0 })
	if got := e.patches.Load(); got != 1 {
		t.Fatalf("claim records = %d, want 1: only the pod that got the job", got)
	}
	e.waitWarm(3)
	if res.SandboxID == "" {
		t.Fatal("no sandbox id")
	}

	all, _ := refusingDialer(1 << 30)
	e2 := newEnv(t, nil, func(o *Options) { o.Dialer = all }).start()
	e2.waitWarm(3)
	_, err = e2.execute("x")
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusBadGateway || !strings.Contains(ae.Msg, "refused") {
		t.Fatalf("every runner unreachable: err = %v, want 502 naming the cause", err)
	}
}

func TestRunnerRefusesJob(t *testing.T) {
	e := newEnv(t, nil).start()
	e.waitWarm(3)
	var n int
	var mu sync.Mutex
	e.setRunner(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		if first {
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"error":"this sandbox already ran its job"}`))
			return
		}
		okRunner(w, r)
	})
	if _, err := e.execute("x"); err != nil {
		t.Fatalf("a runner that refused (409) should send the request to another pod: %v", err)
	}
}

func ownerPod(name, uid string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: typesUID(uid)}}
}

// sandboxPod is a Ready snippet pod of owner (with an ownerReference when
// ownerUID is set), made by the serve process incarnation.
func sandboxPod(name, owner, ownerUID, incarnation string, claimed bool) *corev1.Pod {
	p := kube.SnippetPod(kube.PodOptions{Namespace: testNS, Image: "sandbox:dev",
		Owner: kube.Owner{Name: owner, UID: typesUID(ownerUID), Incarnation: incarnation}}, name, kube.MinUID)
	p.CreationTimestamp = metav1.Now()
	if claimed {
		p.Annotations = map[string]string{kube.AnnotationClaimedBy: owner}
	}
	setReady(p)
	return p
}

// TestJanitor: at start, the pool deletes every pod an earlier start of its
// own container made (used or not: it cannot know), and the pods of owners
// that are gone or replaced; it leaves alone the pods of live owners and
// those it cannot judge.
func TestJanitor(t *testing.T) {
	objs := []runtime.Object{
		ownerPod("serve-0", "serve-0-uid"),
		ownerPod("serve-1", "serve-1-uid"),
		ownerPod("serve-2", "serve-2-new-uid"),
		sandboxPod("sandbox-earlier-claimed", "serve-0", "serve-0-uid", "before", true), // earlier start, used
		sandboxPod("sandbox-earlier-warm", "serve-0", "serve-0-uid", "before", false),   // earlier start: maybe used
		sandboxPod("sandbox-old-serve-0", "serve-0", "serve-0-old-uid", "x", false),     // a former pod named serve-0
		sandboxPod("sandbox-live-owner", "serve-1", "serve-1-uid", "y", true),           // another replica's run
		sandboxPod("sandbox-live-warm", "serve-1", "serve-1-uid", "y", false),           // another replica's pool
		sandboxPod("sandbox-gone-owner", "serve-9", "serve-9-uid", "z", false),          // owner deleted
		sandboxPod("sandbox-replaced", "serve-2", "serve-2-old-uid", "w", false),
		sandboxPod("sandbox-no-ref", "laptop", "", "v", false), // cannot judge: left alone
	}
	e := newEnv(t, objs).start()
	e.eventually("janitor and refill", func() bool {
		own := 0
		for _, p := range e.pods() {
			if p.Labels[kube.LabelOwner] == "serve-0" && p.DeletionTimestamp == nil {
				own++
			}
		}
		return e.pool.Ready() && own == 3
	})
	left := map[string]bool{}
	for _, p := range e.pods() {
		left[p.Name] = true
	}
	for name, want := range map[string]bool{
		"sandbox-earlier-claimed": false, "sandbox-earlier-warm": false, "sandbox-old-serve-0": false,
		"sandbox-live-owner": true, "sandbox-live-warm": true,
		"sandbox-gone-owner": false, "sandbox-replaced": false, "sandbox-no-ref": true,
	} {
		if left[name] != want {
			t.Errorf("%s: present = %v, want %v", name, left[name], want)
		}
	}
	if got := testutil.ToFloat64(e.pool.m.orphans); got != 5 {
		t.Errorf("orphans cleaned = %v, want 5", got)
	}
	// Nothing of the earlier start counts: the pool made its own three.
	if got := e.creates.Load(); got != 3 {
		t.Errorf("creates = %d, want 3", got)
	}
}

func TestGracefulShutdown(t *testing.T) {
	e := newEnv(t, nil).start()
	e.waitWarm(3)
	entered, release := make(chan struct{}), make(chan struct{})
	e.setRunner(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		okRunner(w, r)
	})
	type out struct {
		res wire.Result
		err error
	}
	got := make(chan out, 1)
	go func() {
		res, err := e.execute("slow")
		got <- out{res, err}
	}()
	<-entered

	stopped := make(chan struct{})
	go func() { e.stop(); close(stopped) }()
	e.eventually("shutdown begun", func() bool {
		e.pool.mu.Lock()
		defer e.pool.mu.Unlock()
		return e.pool.closing
	})
	if _, err := e.execute("late"); !errors.Is(err, errShuttingDown) {
		t.Fatalf("a request during shutdown: err = %v, want 503 shutting down", err)
	}
	if e.pool.Ready() {
		t.Fatal("Ready during shutdown")
	}
	select {
	case <-stopped:
		t.Fatal("Run returned with a run in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	o := <-got
	if o.err != nil || o.res.Stdout != "ran: slow" {
		t.Fatalf("run in flight: %+v, %v", o.res, o.err)
	}
	<-stopped
	if pods := e.pods(); len(pods) != 0 {
		t.Fatalf("%d pods left after shutdown", len(pods))
	}
}

func TestMetricsRegister(t *testing.T) {
	e := newEnv(t, nil).start()
	e.waitWarm(3)
	reg := prometheus.NewRegistry()
	if err := e.pool.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(e.pool.m.ready); got != 3 {
		t.Errorf("ready gauge = %v", got)
	}
	if got := testutil.ToFloat64(e.pool.m.target); got != 3 {
		t.Errorf("target gauge = %v", got)
	}
	if n := testutil.CollectAndCount(e.pool.m.podStartup); n != 1 {
		t.Errorf("startup histogram series = %d", n)
	}
}

func TestExecuteCanceledWhileWaiting(t *testing.T) {
	e := newEnv(t, nil)
	e.autoReady.Store(false)
	e.start()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.pool.Execute(ctx, exec.Job{Code: "x"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// BenchmarkExecute measures the pool's own request path -- the claim in memory,
// runner round trip on loopback, release -- against the fake clientset.
func BenchmarkExecute(b *testing.B) {
	e := newEnv(b, nil, func(o *Options) {
		o.Logger = slog.New(slog.DiscardHandler)
		o.Size = 10
	}).start()
	e.waitWarm(10)
	b.ResetTimer()
	for b.Loop() {
		if _, err := e.execute("x"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestReplacesStuckAndExpiringPods: a pod that never becomes Ready (an image
// that cannot be pulled) and a warm pod near its activeDeadlineSeconds are
// both replaced, not counted as supply. The clock is moved, not waited for.
func TestReplacesStuckAndExpiringPods(t *testing.T) {
	e := newEnv(t, nil)
	e.autoReady.Store(false)
	e.start()
	e.eventually("3 pods created", func() bool { return len(e.pods()) == 3 })
	pods := e.pods()
	e.updatePod(pods[0].Name, setReady)
	e.eventually("one Ready in the pool's cache", func() bool {
		e.pool.mu.Lock()
		defer e.pool.mu.Unlock()
		return e.pool.readyCountLocked() == 1
	})

	later := time.Now().Add(kube.ActiveDeadlineSeconds * time.Second)
	pl := e.pool.plan(later)
	if len(pl.remove) != 3 || len(pl.create) != 3 {
		t.Fatalf("plan an hour later: remove %v, create %v; want all 3 replaced", pl.remove, pl.create)
	}
	for name, why := range pl.remove {
		if name == pods[0].Name && !strings.Contains(why, "deadline") || name != pods[0].Name && !strings.Contains(why, "not ready") {
			t.Errorf("%s removed because %q", name, why)
		}
	}
}

// TestRunnerNamesAnotherPod: if the pod at the claimed IP is not the claimed
// pod (the address was reused), the id reports where the job really ran.
func TestRunnerNamesAnotherPod(t *testing.T) {
	e := newEnv(t, nil).start()
	e.waitWarm(3)
	e.setRunner(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(wire.Result{SandboxID: "sandbox-other"})
	})
	res, err := e.execute("x")
	if err != nil || res.SandboxID != "sandbox-other" {
		t.Fatalf("got %+v, %v", res, err)
	}
}

// TestExecuteTiming: the pool times the claim and the runner's round trip,
// and passes on the runner's own figure, in the request's Timing.
func TestExecuteTiming(t *testing.T) {
	e := newEnv(t, nil).start()
	e.waitWarm(3)
	e.handler.Store(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		w.Header().Set(api.ServerTiming, api.TimingRunnerJob+";dur=12.5, "+api.TimingPodReady+";dur=900, other;dur=1")
		okRunner(w, r)
	}))
	ctx, timing := api.WithTiming(context.Background())
	if _, err := e.pool.Execute(ctx, exec.Job{Code: "print(1)", Timeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	got := api.ParseServerTiming(timing.Header())
	if _, ok := got[api.TimingClaim]; !ok {
		t.Errorf("no %s in %v", api.TimingClaim, got)
	}
	if got[api.TimingRunner] < 20 || got[api.TimingRunnerJob] != 12.5 {
		t.Errorf("timing %v: want %s of at least 20 ms and the runner's %s of 12.5 ms", got, api.TimingRunner, api.TimingRunnerJob)
	}
	if _, ok := got["other"]; got[api.TimingPodReady] != 900 || ok {
		t.Errorf("timing %v: want the runner's %s passed on, and no part of its that is not the pod's", got, api.TimingPodReady)
	}
}

// TestMaxAnswerFollowsWait: raising --pool-wait raises the longest answer
// the pool reports, and so serve's write timeout, by as much.
func TestMaxAnswerFollowsWait(t *testing.T) {
	answer := func(wait time.Duration) time.Duration {
		p, err := New(Options{Client: fake.NewSimpleClientset(), Namespace: "ns", Pod: kube.PodOptions{Image: "sandbox:dev"}, Wait: wait})
		if err != nil {
			t.Fatal(err)
		}
		return p.MaxAnswer()
	}
	short, long := answer(DefaultWait), answer(10*time.Minute)
	if long-short != 10*time.Minute-DefaultWait || short < DefaultWait+api.MaxTimeoutS*time.Second {
		t.Errorf("MaxAnswer: %s with the default wait, %s with ten minutes", short, long)
	}
}
