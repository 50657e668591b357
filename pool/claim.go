package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandboxd/sandbox/api"
	"github.com/sandboxd/sandbox/kube"
)

// errShuttingDown answers requests that arrive after shutdown began.
var errShuttingDown = &api.Error{
	Status:     http.StatusServiceUnavailable,
	Msg:        "sandbox service is shutting down, try again shortly",
	RetryAfter: 2 * time.Second,
}

// claim takes a Ready pod for one request, waiting until deadline for one to
// appear. Waiting is on the informer's events, never a timer loop. The claim
// is a single patch that carries the resourceVersion the pool saw: if anyone
// changed the pod since (another replica claimed it, the kubelet updated its
// status), the API server answers Conflict and the next candidate is tried;
// the pod comes back as a candidate when the informer shows its new state.
//
// The claim's API calls end at the same deadline: an API server that stops
// answering gives the empty pool's 503, not a request that hangs. A patch
// that still lands after that is a stale claim, which reconcile deletes.
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

	for {
		p.mu.Lock()
		if p.closing {
			p.mu.Unlock()
			return nil, errShuttingDown
		}
		cands := p.candidatesLocked(time.Now())
		changed := p.changed
		unsealed := p.sealErrorLocked()
		p.mu.Unlock()
		if len(cands) == 0 && unsealed != nil {
			// No pod will come: their runners see the network open.
			return nil, unsealed
		}

		for _, pod := range cands {
			got, err := p.tryClaim(wctx, pod)
			if err == nil {
				return got, nil
			}
			if wctx.Err() != nil {
				if ctx.Err() == nil {
					p.log.Warn("claim sandbox pod: the API server did not answer before the pool wait ended", "pod", pod.Name, "err", err)
				}
				return nil, ended()
			}
			if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) && !errors.Is(err, errTaken) {
				p.log.Warn("claim sandbox pod", "pod", pod.Name, "err", err)
			}
		}

		select {
		case <-changed:
		case <-wctx.Done():
			return nil, ended()
		}
	}
}

// candidatesLocked lists the pods a request may claim, oldest first: they
// are the closest to their deadline and have waited longest.
func (p *Pool) candidatesLocked(now time.Time) []*corev1.Pod {
	pods, _ := p.lister.List(labels.Everything())
	var out []*corev1.Pod
	for _, pod := range pods {
		if p.availableLocked(pod, now) {
			out = append(out, pod)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		ti, tj := out[i].CreationTimestamp, out[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// errTaken: another request of this process got there first.
var errTaken = errors.New("pod already taken here")

// tryClaim marks pod in use locally (so concurrent requests here do not race
// for it) and claims it on the API server with one optimistic write.
func (p *Pool) tryClaim(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	p.mu.Lock()
	if p.inUse[pod.Name] || p.closing {
		p.mu.Unlock()
		return nil, errTaken
	}
	p.inUse[pod.Name] = true
	p.mu.Unlock()

	got, err := p.client.CoreV1().Pods(p.opts.Namespace).Patch(ctx, pod.Name, types.MergePatchType,
		claimPatch(pod.ResourceVersion, p.claimer, time.Now()), metav1.PatchOptions{})
	if err != nil {
		p.mu.Lock()
		delete(p.inUse, pod.Name)
		p.mu.Unlock()
		return nil, err
	}
	p.poke() // the pod left the supply: start its replacement now
	if got.Status.PodIP == "" {
		// The patch answer carries the status; keep the informer's if the
		// API server (or a fake) left it out.
		got.Status = pod.Status
	}
	return got, nil
}

// claimPatch is a JSON merge patch that sets the claim label. Carrying
// metadata.resourceVersion makes the API server apply it only to the version
// the pool looked at, which is what makes the claim atomic.
func claimPatch(resourceVersion, claimer string, now time.Time) []byte {
	b, err := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"resourceVersion": resourceVersion,
			"labels":          map[string]string{kube.LabelClaimedBy: claimer},
			"annotations":     map[string]string{kube.AnnotationClaimedAt: now.UTC().Format(time.RFC3339Nano)},
		},
	})
	if err != nil {
		panic(fmt.Sprintf("marshal claim patch: %v", err)) // only strings inside
	}
	return b
}
