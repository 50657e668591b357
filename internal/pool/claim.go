package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/kube"
)

// The claim's record on the pod: written after the job reached the runner,
// off the request path.
const (
	// recordTimeout bounds the record's API calls, retries included; the
	// used pod's delete waits for it, so it also bounds that delay.
	recordTimeout = 10 * time.Second
	// recordAttempts and recordBackoff: a write the API server refused
	// (throttled, briefly unavailable) is tried again, 100 ms later, then
	// 200 ms, 400 ms.
	recordAttempts = 4
	recordBackoff  = 100 * time.Millisecond
)

// errShuttingDown answers requests that arrive after shutdown began.
var errShuttingDown = &api.Error{
	Status:     http.StatusServiceUnavailable,
	Msg:        "sandbox service is shutting down, try again shortly",
	RetryAfter: 2 * time.Second,
}

// claim takes a Ready pod for one request, waiting until deadline for one to
// appear. Waiting is on the informer's events, never a timer loop.
//
// The claim is decided here, in memory, under the pool's lock: the informer
// shows only this process's own pods (see New), so nobody else can hand them
// out, and a pod once taken is marked spent and never offered again. No
// API call is on this path; recordClaim writes the claim to the pod once
// the job has reached the runner. A pod's own runner takes exactly one job
// and refuses any other (409), the last line of defence should two
// claimers ever meet one pod.
func (p *Pool) claim(ctx context.Context, deadline time.Time) (*corev1.Pod, error) {
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	// ended says why wctx is done: the request went away, or the wait ran out.
	ended := func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return api.ErrNoCapacity
	}

	// Claims start after the janitor ran (see Run).
	select {
	case <-p.started:
	case <-wctx.Done():
		return nil, ended()
	case <-p.stopping:
		return nil, errShuttingDown
	}

	p.mu.Lock()
	p.targeter.claimed(p.clock.Now())
	var me *waiter
	defer func() {
		if me != nil {
			// Leaving without a pod: those behind move up, and a pod this
			// request was not there to take may now be theirs.
			p.mu.Lock()
			if p.leaveLocked(me) {
				p.broadcastLocked()
			}
			p.mu.Unlock()
		}
	}()
	for {
		if p.closing {
			p.mu.Unlock()
			return nil, errShuttingDown
		}
		pod := p.takeLocked(time.Now(), p.queuePosLocked(me))
		if pod != nil && me != nil {
			p.leaveLocked(me)
			me = nil
		}
		unsealed := p.sealErrorLocked()
		if pod == nil && unsealed == nil {
			unsealed = p.apiAwayErrorLocked(time.Now())
		}
		if pod == nil && unsealed == nil && me == nil {
			// One refused at once for the seal fault (below) does not wait,
			// and so does not grow the target for pods that cannot be used.
			me = &waiter{}
			p.waiters = append(p.waiters, me)
		}
		grew := p.retargetLocked()
		changed := p.changed
		p.mu.Unlock()
		if pod != nil || grew {
			p.poke() // start the taken pod's replacement, or the new target's pods
		}
		if pod != nil {
			return pod, nil
		}
		if unsealed != nil {
			// No pod will come: their runners see the network open, or
			// the API server is away.
			return nil, unsealed
		}
		select {
		case <-changed:
		case <-wctx.Done():
			return nil, ended()
		}
		p.mu.Lock()
	}
}

// A waiter is a request waiting for a pod. Pods go to waiters in the order
// they came, and a request that finds others waiting queues behind them:
// with every waiter woken on each pod event, whoever got the lock first
// would win, and under a steady overload some requests would lose race
// after race until their wait ran out (503) while later ones were served.
// In order, a request waits about as long as the pods ahead of it take to
// start.
type waiter struct {
	_ byte // not empty, so that each waiter has an address of its own
}

// queuePosLocked is how many requests are ahead of me: all the waiters when
// me is nil (a request that has not queued yet).
func (p *Pool) queuePosLocked(me *waiter) int {
	if me == nil {
		return len(p.waiters)
	}
	return slices.Index(p.waiters, me)
}

// leaveLocked takes me out of the queue and reports whether anyone was
// behind it. One that leaves with a pod needs to wake nobody: each behind
// it moves up one place as the pods left drop by one.
func (p *Pool) leaveLocked(me *waiter) (behind bool) {
	i := slices.Index(p.waiters, me)
	if i < 0 {
		return false
	}
	p.waiters = slices.Delete(p.waiters, i, i+1)
	return i < len(p.waiters)
}

// takeLocked hands out the available pod closest to its deadline (the
// oldest), marking it in use and spent, to a request with ahead requests
// before it in the queue: only when there are pods for all of them too. It
// returns nil when there is none for it.
func (p *Pool) takeLocked(now time.Time, ahead int) *corev1.Pod {
	cands := p.candidatesLocked(now)
	if len(cands) <= ahead {
		return nil
	}
	pod := cands[0]
	p.inUse[pod.Name] = now
	p.spent[pod.Name] = true
	p.m.ready.Set(float64(len(cands) - 1))
	return pod
}

// candidatesLocked lists the pods a request may claim, oldest first: they
// are the closest to their deadline and have waited longest. Pods on a
// suspect node (suspectFor) come after all the others.
func (p *Pool) candidatesLocked(now time.Time) []*corev1.Pod {
	pods, _ := p.lister.List(p.selector)
	var out []*corev1.Pod
	for _, pod := range pods {
		if p.availableLocked(pod, now) {
			out = append(out, pod)
		}
	}
	for node, until := range p.suspect {
		if now.After(until) {
			delete(p.suspect, node)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if si, sj := p.suspectLocked(out[i], now), p.suspectLocked(out[j], now); si != sj {
			return sj
		}
		ti, tj := out[i].CreationTimestamp, out[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// suspectLocked reports whether pod is on a suspect node.
func (p *Pool) suspectLocked(pod *corev1.Pod, now time.Time) bool {
	until, ok := p.suspect[pod.Spec.NodeName]
	return ok && pod.Spec.NodeName != "" && now.Before(until)
}

// suspectNode has node's pods handed out last for suspectFor, after a
// runner there could not be reached at all (err).
func (p *Pool) suspectNode(node string, err error) {
	if node == "" || !isDialError(err) || errors.Is(err, syscall.ECONNREFUSED) {
		return
	}
	p.mu.Lock()
	_, already := p.suspect[node]
	p.suspect[node] = time.Now().Add(suspectFor)
	p.mu.Unlock()
	if !already {
		p.log.Warn("a runner on this node cannot be reached; its pods go last", "node", node, "for", suspectFor, "err", err)
	}
}

// retargetLocked re-evaluates the warm target and reports whether it grew
// (so that the caller pokes the reconcile loop).
func (p *Pool) retargetLocked() (grew bool) {
	now := p.clock.Now()
	before := p.targeter.target
	target, why := p.targeter.update(now, len(p.waiters))
	p.m.claimRate.Set(p.targeter.claimRate(now))
	if why == "" {
		return false
	}
	p.m.target.Set(float64(target))
	p.m.targetChanges.WithLabelValues(why).Inc()
	p.log.Info("warm target moved", "from", before, "to", target, "reason", why,
		"claim_rate", p.targeter.claimRate(now), "pod_start_s", p.targeter.start, "waiting", len(p.waiters))
	return target > before
}

// recordClaim writes the claim onto pod name: the claimed-by and
// claimed-at annotations, which operators, verify's watch and the e2e suite
// read. It is called once the job has been written to the runner, and never
// holds up the answer: it runs in the background, tries again when the API
// server refuses, and gives up after recordTimeout (the pool itself never
// needs it: spent is its record). A pod already released is not written to
// -- its delete is under way.
func (p *Pool) recordClaim(name string) {
	p.mu.Lock()
	at, ok := p.inUse[name]
	if !ok || p.recording[name] != nil {
		p.mu.Unlock()
		return
	}
	done := make(chan struct{})
	p.recording[name] = done
	p.bg.Add(1)
	p.mu.Unlock()

	go func() {
		defer p.bg.Done()
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
		defer cancel()
		patch := claimPatch(p.claimer, at)
		wait := recordBackoff
		for attempt := 1; ; attempt++ {
			_, err := p.client.CoreV1().Pods(p.opts.Namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
			if err == nil || apierrors.IsNotFound(err) {
				return
			}
			if attempt == recordAttempts || ctx.Err() != nil {
				p.m.recordErrors.Inc()
				p.log.Warn("record the claim on the sandbox pod (the pool does not need it; it deletes the pod after the run)",
					"pod", name, "attempts", attempt, "err", err)
				return
			}
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
			wait *= 2
		}
	}()
}

// claimPatch is a JSON merge patch that records the claim. It carries no
// resourceVersion: the pod is this process's alone, and the kubelet's status
// updates in the meantime must not make it fail.
func claimPatch(claimer string, at time.Time) []byte {
	b, err := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"annotations": map[string]string{
				kube.AnnotationClaimedBy: claimer,
				kube.AnnotationClaimedAt: at.UTC().Format(time.RFC3339Nano),
			},
		},
	})
	if err != nil {
		panic(fmt.Sprintf("marshal claim patch: %v", err)) // only strings inside
	}
	return b
}
