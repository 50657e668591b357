package pool

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox/internal/kube"
)

// Backoff after a failed create (quota, admission, API trouble), so a broken
// template does not hammer the API server.
const (
	minBackoff = 200 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// reconcileLoop runs reconcile passes when poked, one at a time, until ctx
// ends. A failed create schedules a retry with exponential backoff. Every
// retargetInterval it re-evaluates the warm target, which moves without
// any pod event when the claims stop.
func (p *Pool) reconcileLoop(ctx context.Context) {
	backoff := time.Duration(0)
	var retry <-chan time.Time
	tick := p.clock.NewTicker(retargetInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		case <-retry:
		case <-tick.C():
			p.mu.Lock()
			before := p.targeter.target
			p.retargetLocked()
			moved := p.targeter.target != before
			p.mu.Unlock()
			if !moved {
				continue
			}
		}
		if failed := p.reconcile(ctx); failed {
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			retry = time.After(backoff)
		} else {
			backoff, retry = 0, nil
		}
	}
}

// plan is what one reconcile pass decided, computed under the lock.
type plan struct {
	create []string
	remove map[string]string // pod name -> why
}

// reconcile creates pods up to the target and removes the pool's dead ones.
// It reports whether a create or delete failed.
func (p *Pool) reconcile(ctx context.Context) (failed bool) {
	pl := p.plan(time.Now())
	if len(pl.create) == 0 && len(pl.remove) == 0 {
		return false
	}
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	for name, why := range pl.remove {
		wg.Go(func() {
			if err := p.deletePod(ctx, name, why); err != nil {
				mu.Lock()
				failed = true
				mu.Unlock()
			}
		})
	}
	for _, name := range pl.create {
		wg.Go(func() {
			if err := p.createPod(ctx, name); err != nil {
				mu.Lock()
				failed = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return failed
}

// plan counts the supply -- live unclaimed pods, Ready or still starting,
// plus creates the informer has not shown -- and decides what to do: create
// up to the warm target, remove dead and used pods, and, when the target
// shrank, the surplus of idle ones.
func (p *Pool) plan(now time.Time) plan {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl := plan{remove: map[string]string{}}
	if p.closing {
		return pl
	}
	pods, _ := p.lister.List(p.selector)
	seen := make(map[string]bool, len(pods))
	supply := 0
	var idle []*corev1.Pod
	for _, pod := range pods {
		seen[pod.Name] = true
		_, inUse := p.inUse[pod.Name]
		if inUse || p.exp.deleting(pod.Name) || pod.DeletionTimestamp != nil {
			continue
		}
		switch {
		case p.spent[pod.Name]:
			// Handed out here and released, but its delete failed: never
			// hand it out again, try the delete again.
			pl.remove[pod.Name] = "used"
		case kube.IsFinished(pod):
			// Died while warm (runner crash, deadline) or a leftover.
			pl.remove[pod.Name] = "finished: " + string(pod.Status.Phase) + " " + pod.Status.Reason
		case kube.IsClaimed(pod):
			// A claim this process does not know of. Never reuse it.
			pl.remove[pod.Name] = "stale claim"
		case p.wasReady[pod.Name] && !kube.IsReady(pod):
			// Ready once and not any more: its node stopped reporting (the
			// node lifecycle controller marks the pods of a node it lost
			// NotReady, about 40 s after its last heartbeat) or its runner
			// stopped answering its probe. Either way no request can use
			// it; counted as starting, it would hold a replacement back
			// until the startup deadline, or until the node's pods are
			// evicted minutes later. The delete (no grace period) needs
			// nothing of the node.
			pl.remove[pod.Name] = "not ready any more: " + lostWhy(pod)
			p.log.Warn("warm sandbox pod lost its readiness; replacing it", "pod", pod.Name, "node", pod.Spec.NodeName,
				"why", lostWhy(pod))
		case !kube.IsReady(pod) && now.Sub(pod.CreationTimestamp.Time) > startupTimeout:
			pl.remove[pod.Name] = "not ready after " + startupTimeout.String() + ": " + kube.WaitingReason(pod)
		case nearDeadline(pod, now):
			pl.remove[pod.Name] = "near its active deadline"
		default:
			supply++
			idle = append(idle, pod)
		}
	}
	supply += p.exp.pendingCreates(now, seen)
	target := p.targeter.target
	// Surplus after the target shrank: the oldest pods go first, being the
	// nearest their deadline. Creates not yet seen cannot be deleted; they
	// count, and the next pass takes what is then over.
	if surplus := supply - target; surplus > 0 {
		sort.Slice(idle, func(i, j int) bool {
			ti, tj := idle[i].CreationTimestamp, idle[j].CreationTimestamp
			if !ti.Equal(&tj) {
				return ti.Before(&tj)
			}
			return idle[i].Name < idle[j].Name
		})
		for _, pod := range idle[:min(surplus, len(idle))] {
			pl.remove[pod.Name] = "surplus over the warm target"
			supply--
		}
	}
	for name := range pl.remove {
		p.exp.expectDelete(name, now)
	}
	for i := supply; i < target; i++ {
		name := kube.PodName()
		if _, inUse := p.inUse[name]; seen[name] || inUse {
			continue // vanishingly rare; the next pass makes up for it
		}
		p.exp.expectCreate(name, now)
		p.createdAt[name] = now
		pl.create = append(pl.create, name)
	}
	sort.Strings(pl.create)
	return pl
}

// createPod creates one sandbox pod whose create was already expected.
func (p *Pool) createPod(ctx context.Context, name string) error {
	pod := kube.SnippetPod(p.opts.Pod, name, kube.RandomUID())
	_, err := p.client.CoreV1().Pods(p.opts.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		p.mu.Lock()
		p.exp.createFailed(name)
		delete(p.createdAt, name)
		p.mu.Unlock()
		p.m.createErrors.Inc()
		if ctx.Err() == nil {
			p.log.Error("create sandbox pod", "pod", name, "err", err)
			p.noteAPIError(err)
		}
		return err
	}
	p.mu.Lock()
	p.noteAPIOKLocked()
	p.mu.Unlock()
	p.log.Debug("created sandbox pod", "pod", name)
	return nil
}

// deletePod deletes a pod at once (no grace period: nothing in it is worth
// keeping). The caller has already expected the delete, or it is the
// shutdown sweep.
// A failed delete is forgotten, so the next reconcile pass retries it.
func (p *Pool) deletePod(ctx context.Context, name, why string) error {
	zero := int64(0)
	err := p.client.CoreV1().Pods(p.opts.Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err == nil || apierrors.IsNotFound(err) {
		p.log.Debug("deleted sandbox pod", "pod", name, "why", why)
		return nil
	}
	p.mu.Lock()
	p.exp.deleteFailed(name)
	p.mu.Unlock()
	p.log.Error("delete sandbox pod", "pod", name, "why", why, "err", err)
	return err
}

// release gives a used (or unusable) pod back to the API server: it stops
// counting at once and is deleted off the request path, after its claim's
// record (if the job reached it) is written, so that whoever watches pods
// sees every claim. It stays spent until the informer shows it gone.
func (p *Pool) release(pod *corev1.Pod, why string) {
	p.mu.Lock()
	p.exp.expectDelete(pod.Name, time.Now())
	delete(p.inUse, pod.Name)
	if _, gone := p.gone[pod.Name]; gone {
		delete(p.spent, pod.Name) // no delete event is still to come
	}
	delete(p.gone, pod.Name)
	recorded := p.recording[pod.Name]
	delete(p.recording, pod.Name)
	p.bg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.bg.Done()
		if recorded != nil {
			<-recorded
		}
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if p.deletePod(ctx, pod.Name, why) != nil {
			p.poke() // logged; the reconcile pass deletes spent pods again
		}
	}()
}

// lostWhy says what a pod that was Ready shows now: the node lifecycle
// controller sets only the Ready condition, with no reason, so the pod's
// node is named too.
func lostWhy(pod *corev1.Pod) string {
	since := ""
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && !c.LastTransitionTime.IsZero() {
			since = " since " + c.LastTransitionTime.UTC().Format(time.TimeOnly)
		}
	}
	return fmt.Sprintf("%s%s, on node %q", kube.WaitingReason(pod), since, pod.Spec.NodeName)
}
