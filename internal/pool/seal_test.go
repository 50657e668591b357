package pool

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/kube"
)

// setUnproven marks a pod Running, with an IP and its runner started long
// ago, but not Ready: a runner that never proved its egress cut.
func setUnproven(pod *corev1.Pod) {
	setReady(pod)
	started := metav1.NewTime(time.Now().Add(-time.Minute))
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	pod.Status.ContainerStatuses[0].Ready = false
	pod.Status.ContainerStatuses[0].State.Running.StartedAt = started
}

// sealRunner answers GET /seal with sealed and evidence, and any job with
// okRunner.
func sealRunner(sealed bool, evidence string, asked *atomic.Int32) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/seal" {
			asked.Add(1)
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(api.SealState{Sealed: sealed, Checked: true, CheckedAt: time.Now(), Evidence: evidence})
			return
		}
		okRunner(w, r)
	}
}

const openEvidence = "tcp 10.96.0.1:443 connected in 1 ms"

// unprovenEnv is a pool whose pods never become Ready on their own: they
// run, unproven, and their runner answers /seal as told.
func unprovenEnv(t *testing.T, sealed bool) (*env, *atomic.Int32) {
	t.Helper()
	var asked atomic.Int32
	e := newEnv(t, nil, func(o *Options) { o.Wait = 3 * time.Second })
	e.autoReady.Store(false)
	e.setRunner(sealRunner(sealed, openEvidence, &asked))
	e.pool.sealGrace, e.pool.sealEvery = 0, 50*time.Millisecond
	e.start()
	e.eventually("3 pods created", func() bool { return len(e.pods()) == 3 })
	for _, p := range e.pods() {
		e.updatePod(p.Name, setUnproven)
	}
	return e, &asked
}

// TestUnsealedNetworkAnswers503: pods whose runner sees the network open
// are never used; a request gets the 503 that says so at once, not after
// the pool wait; serve stays Ready; the metric and the log say why.
func TestUnsealedNetworkAnswers503(t *testing.T) {
	e, asked := unprovenEnv(t, false)
	e.eventually("the pool asked a stuck runner", func() bool { return asked.Load() > 0 })
	e.eventually("the fault recorded", func() bool { return testutil.ToFloat64(e.pool.m.unsealed) > 0 })

	start := time.Now()
	_, err := e.execute("print(1)")
	took := time.Since(start)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || !strings.HasPrefix(ae.Msg, api.NotSealed) ||
		!strings.Contains(ae.Msg, openEvidence) || ae.RetryAfter == 0 {
		t.Fatalf("err = %v, want a 503 %q naming the evidence, with Retry-After", err, api.NotSealed)
	}
	if took > time.Second {
		t.Errorf("answered after %s: the reason is known, the request need not wait for the pool", took)
	}
	if v := testutil.ToFloat64(e.pool.m.targetChanges.WithLabelValues(reasonWaiting)); v != 0 {
		t.Errorf("the target grew %v times for waiting requests: one refused at once waits for no pod", v)
	}
	if !e.pool.Ready() {
		t.Error("serve left its Service: clients would hear a refused connection instead of the reason")
	}
	if e.patches.Load() != 0 {
		t.Errorf("%d claims: an unproven pod was claimed", e.patches.Load())
	}

	// A pod proves its seal (the policy engine is back): the fault ends and
	// requests run again.
	e.updatePod(e.pods()[0].Name, setReady)
	e.eventually("the fault cleared", func() bool { return testutil.ToFloat64(e.pool.m.unsealed) == 0 })
	if res, err := e.execute("print(2)"); err != nil || res.Stdout != "ran: print(2)" {
		t.Fatalf("after the proof: %+v, %v", res, err)
	}
}

// TestUnprovenForAnotherReason is the control: pods not Ready whose runner
// says the network is sealed are no seal fault, and a request meets the
// empty pool's documented 503 after the wait.
func TestUnprovenForAnotherReason(t *testing.T) {
	e, asked := unprovenEnv(t, true)
	e.eventually("the pool asked a stuck runner", func() bool { return asked.Load() > 0 })
	_, err := e.execute("print(1)")
	var ae *api.Error
	if !errors.As(err, &ae) || ae != api.ErrNoCapacity {
		t.Fatalf("err = %v, want api.ErrNoCapacity", err)
	}
	if v := testutil.ToFloat64(e.pool.m.unsealed); v != 0 {
		t.Errorf("unsealed gauge %v", v)
	}
}

// TestRunnerRefusesUnsealed: a Ready pod whose runner lost its proof (a
// policy deleted after it was Ready) refuses the job; nothing runs, the pod
// is dropped, the fault recorded, and with no pod left the request gets the
// 503 that says why rather than a 502.
func TestRunnerRefusesUnsealed(t *testing.T) {
	e := newEnv(t, nil, func(o *Options) { o.Size = 1; o.Wait = 2 * time.Second })
	var ran atomic.Int32
	e.setRunner(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/execute" {
			ran.Add(1)
			api.WriteError(w, http.StatusServiceUnavailable, api.NotSealed+": "+openEvidence+" (checked 5ms ago)")
			return
		}
		okRunner(w, r)
	})
	e.pool.sealGrace = 0 // the warm pod's own proof is no longer recent
	e.start().waitWarm(1)
	e.autoReady.Store(false) // replacements stay unproven
	_, err := e.execute("print(1)")
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || !strings.Contains(ae.Msg, openEvidence) {
		t.Fatalf("err = %v, want the 503 %q with the runner's evidence", err, api.NotSealed)
	}
	if ran.Load() != 1 {
		t.Errorf("the job was sent %d times", ran.Load())
	}
	if v := testutil.ToFloat64(e.pool.m.unsealed); v != 1 {
		t.Errorf("unsealed gauge %v, want 1", v)
	}
	e.eventually("the refusing pod deleted", func() bool {
		for _, p := range e.pods() {
			if kube.IsClaimed(&p) {
				return false
			}
		}
		return true
	})
}

// TestGaveUpPodTellsWhy: serve cannot reach its pods (a stopped policy
// engine leaves serve's own egress rules behind, which do not know the new
// pods), but a runner that gave up unproven leaves the evidence in its
// termination message: the pool reads it there and answers the 503.
func TestGaveUpPodTellsWhy(t *testing.T) {
	e := newEnv(t, nil, func(o *Options) { o.Wait = 3 * time.Second })
	e.autoReady.Store(false)
	e.setRunner(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the pool reached the runner (%s %s): this test's runners are out of reach", r.Method, r.URL.Path)
	})
	e.start()
	e.eventually("3 pods created", func() bool { return len(e.pods()) == 3 })
	msg := `{"time":"…","level":"WARN","msg":"the network is not sealed: not Ready, no job taken until it is"}
sandbox: runner: gave up after 30s: ` + api.NotSealed + `: ` + openEvidence + ` (checked 12ms ago)
`
	e.updatePod(e.pods()[0].Name, func(p *corev1.Pod) {
		setTerminated(p, "Error", 1)
		p.Status.ContainerStatuses[0].State.Terminated.Message = msg
	})
	e.eventually("the fault recorded", func() bool { return testutil.ToFloat64(e.pool.m.unsealed) > 0 })
	_, err := e.execute("print(1)")
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || !strings.Contains(ae.Msg, openEvidence+" (checked") {
		t.Fatalf("err = %v, want the 503 with the runner's last words", err)
	}
}

// TestSlowProofIsNoFault: while pods do become Ready (prove their seal),
// one stuck pod that reports the network open is a late pod, not an open
// network: no fault, and requests keep waiting for a pod rather than get
// the 503 that blames the network.
func TestSlowProofIsNoFault(t *testing.T) {
	var asked atomic.Int32
	e := newEnv(t, nil, func(o *Options) { o.Size = 2 })
	e.setRunner(sealRunner(false, openEvidence, &asked))
	e.pool.sealEvery = 50 * time.Millisecond
	e.start().waitWarm(2)
	e.updatePod(e.pods()[0].Name, setUnproven) // one pod late; the other Ready
	time.Sleep(300 * time.Millisecond)         // several of the pool's passes
	if v := testutil.ToFloat64(e.pool.m.unsealed); v != 0 {
		t.Errorf("unsealed gauge %v while another pod is Ready", v)
	}
	if res, err := e.execute("print(1)"); err != nil || res.Stdout != "ran: print(1)" {
		t.Errorf("execute: %+v, %v", res, err)
	}
}
