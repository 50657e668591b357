package pool

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/kube"
)

// A pod's runner is Ready only once it has proven its egress cut (see
// package seal). On a cluster whose network plugin does not enforce
// NetworkPolicy, or whose engine has stopped, no pod ever proves it: the
// pool then asks the stuck pods why, and answers requests with a 503 that
// says so instead of letting them wait for a pod that will never come.
// serve stays in its Service meanwhile (Ready is about the process), so its
// clients hear the reason rather than a refused connection.
const (
	// sealGrace is how long a runner may run unproven before the pool asks
	// it why: a NetworkPolicy engine programs a new pod within a second or
	// two, and within several under heavy pod churn on a small node.
	sealGrace = 20 * time.Second
	// sealCheckEvery spaces the pool's passes over its unproven pods.
	sealCheckEvery = 3 * time.Second
	// sealAskTimeout bounds one question to a runner.
	sealAskTimeout = 2 * time.Second
	// sealAskMax is how many stuck pods one pass asks.
	sealAskMax = 3
)

// sealFault is why the pool's pods cannot be used: a runner found the
// network open.
type sealFault struct {
	pod      string
	evidence string
	pods     int // how many of the pods asked said so
}

func (f *sealFault) String() string {
	return fmt.Sprintf("sandbox pods cannot prove their egress cut, so none runs a snippet (is NetworkPolicy enforced in this cluster, and its engine running?); pod %s: %s",
		f.pod, f.evidence)
}

// errUnsealedRunner is a runner that refused its job because its last proof
// failed or is stale: nothing ran.
type errUnsealedRunner struct {
	pod string
	msg string
}

func (e *errUnsealedRunner) Error() string { return fmt.Sprintf("sandbox pod %s: %s", e.pod, e.msg) }

// sealLoop asks the pool's stuck pods why they are not Ready, every
// sealCheckEvery, until ctx ends.
func (p *Pool) sealLoop(ctx context.Context) {
	t := time.NewTicker(p.sealEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.checkSeal(ctx)
	}
}

// checkSeal asks the runners of pods that have run unproven for longer than
// the grace period for their latest proof, and records the fault (or its
// end) they report.
func (p *Pool) checkSeal(ctx context.Context) {
	now := time.Now()
	p.mu.Lock()
	pods, _ := p.lister.List(labels.Everything())
	var stuck []*corev1.Pod
	for _, pod := range pods {
		if p.liveLocked(pod) && unproven(pod, now, p.sealGrace) {
			stuck = append(stuck, pod)
		}
	}
	anyReady := p.readyCountLocked() > 0
	healthy := p.provingLocked(now)
	p.mu.Unlock()
	if len(stuck) == 0 {
		if anyReady {
			p.setSealFault(nil) // every pod proved its seal (again)
		}
		return
	}
	if healthy {
		// Pods do prove their seal, some slowly (a policy engine behind
		// under churn): the network is not open, the stuck pods are late.
		return
	}
	sort.Slice(stuck, func(i, j int) bool { return stuck[i].Name < stuck[j].Name })
	var fault *sealFault
	sealed := 0
	for _, pod := range stuck[:min(len(stuck), sealAskMax)] {
		actx, cancel := context.WithTimeout(ctx, sealAskTimeout)
		addr := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(p.opts.Pod.RunnerPort)))
		st, err := api.ReadSealState(actx, p.http, addr)
		cancel()
		switch {
		case err != nil:
			p.log.Debug("ask an unproven pod's runner why", "pod", pod.Name, "err", err)
		case st.Sealed:
			sealed++ // not Ready for another reason
		case st.Checked:
			if fault == nil {
				fault = &sealFault{pod: pod.Name, evidence: st.Evidence}
			}
			fault.pods++
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case fault != nil && !p.provingLocked(time.Now()):
		// Checked again under the lock: a pod may have proven its seal
		// while the runners were being asked.
		p.setSealFaultLocked(fault)
	case fault == nil && sealed > 0:
		p.setSealFaultLocked(nil)
	}
}

// provingLocked reports whether the pool's pods show the network sealed:
// one is Ready now, or one proved its seal within the grace period. Only
// when none does is a stuck pod's report a fault of the network rather than
// a late pod.
func (p *Pool) provingLocked(now time.Time) bool {
	return p.readyCountLocked() > 0 || now.Sub(p.lastProof) < p.sealGrace
}

// unproven reports a pod whose runner has been running, not Ready, for
// longer than grace: on a sealed network it would have proven it by now.
func unproven(pod *corev1.Pod, now time.Time, grace time.Duration) bool {
	if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" || kube.IsReady(pod) {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == kube.RunnerContainer && cs.State.Running != nil {
			return now.Sub(cs.State.Running.StartedAt.Time) > grace
		}
	}
	return false
}

// setSealFault records the pool's seal fault (nil: none), logs a change and
// wakes the waiting requests, which answer it at once when no pod is left.
func (p *Pool) setSealFault(f *sealFault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setSealFaultLocked(f)
}

func (p *Pool) setSealFaultLocked(f *sealFault) {
	old := p.unsealed
	p.unsealed = f
	if f == nil {
		p.m.unsealed.Set(0)
	} else {
		p.m.unsealed.Set(float64(f.pods))
	}
	p.broadcastLocked()
	switch {
	case f != nil && (old == nil || old.evidence != f.evidence):
		p.log.Error(api.NotSealed+": no sandbox pod is used, and requests get 503, until one proves its egress cut; is NetworkPolicy enforced in this cluster, and its engine running?",
			"pod", f.pod, "evidence", f.evidence, "unsealed_pods", f.pods)
	case f == nil && old != nil:
		p.log.Info("network sealed again: a sandbox pod proved its egress cut")
	}
}

// noteGaveUpLocked reads a finished pod's termination message: a runner
// that gave up unproven leaves its evidence there (see seal.GiveUp), which
// serve can read even when it cannot reach the pod to ask.
func (p *Pool) noteGaveUpLocked(pod *corev1.Pod) {
	msg := kube.RunnerMessage(pod)
	i := strings.LastIndex(msg, api.NotSealed) // its last words, not an earlier log line
	if i < 0 || (p.unsealed != nil && p.unsealed.pod == pod.Name) || p.provingLocked(time.Now()) {
		return
	}
	ev := msg[i+len(api.NotSealed):]
	if j := strings.IndexByte(ev, '\n'); j >= 0 {
		ev = ev[:j]
	}
	p.setSealFaultLocked(&sealFault{pod: pod.Name, evidence: strings.TrimPrefix(strings.TrimSpace(ev), ": "), pods: 1})
}

// clearSealFaultLocked ends the fault when a pod proves its seal (it became
// Ready). The caller holds p.mu and broadcasts.
func (p *Pool) clearSealFaultLocked() {
	if p.unsealed == nil {
		return
	}
	p.unsealed = nil
	p.m.unsealed.Set(0)
	p.log.Info("network sealed again: a sandbox pod proved its egress cut")
}

// sealErrorLocked is the answer for a request that finds no pod while the
// pool's pods cannot prove their seal; nil otherwise.
func (p *Pool) sealErrorLocked() error {
	if p.unsealed == nil {
		return nil
	}
	return api.NotSealedError(p.unsealed.String())
}

// noteUnsealedRunner records a runner's refusal for want of a proof as the
// pool's fault, and reports whether err was one. The request then tries
// another pod, which proved its own seal, or, when none is left, gets the
// fault's 503 from claim.
func (p *Pool) noteUnsealedRunner(err error) bool {
	var ur *errUnsealedRunner
	if !errors.As(err, &ur) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.provingLocked(time.Now()) {
		p.setSealFaultLocked(&sealFault{pod: ur.pod, evidence: strings.TrimPrefix(strings.TrimPrefix(ur.msg, api.NotSealed), ": "), pods: 1})
	}
	return true
}
