package pool

import (
	"context"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandboxd/sandbox/kube"
)

// Backoff after a failed create (quota, admission, API trouble), so a broken
// template does not hammer the API server.
const (
	minBackoff = 200 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// reconcileLoop runs reconcile passes when poked, one at a time, until ctx
// ends. A failed create schedules a retry with exponential backoff.
func (p *Pool) reconcileLoop(ctx context.Context) {
	backoff := time.Duration(0)
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		case <-retry:
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
// plus creates the informer has not shown -- and decides what to do.
func (p *Pool) plan(now time.Time) plan {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl := plan{remove: map[string]string{}}
	if p.closing {
		return pl
	}
	pods, _ := p.lister.List(labels.Everything())
	seen := make(map[string]bool, len(pods))
	supply := 0
	for _, pod := range pods {
		seen[pod.Name] = true
		if p.inUse[pod.Name] || p.exp.deleting(pod.Name) || pod.DeletionTimestamp != nil {
			continue
		}
		switch {
		case kube.IsFinished(pod):
			// Died while warm (runner crash, deadline) or a leftover; the
			// janitor handles claimed pods of earlier runs, this handles the rest.
			pl.remove[pod.Name] = "finished: " + string(pod.Status.Phase) + " " + pod.Status.Reason
		case pod.Labels[kube.LabelClaimedBy] != "":
			// Claimed by this owner but not in use here: a run of an earlier
			// process of the same pod. Never reuse it.
			pl.remove[pod.Name] = "stale claim"
		case !kube.IsReady(pod) && now.Sub(pod.CreationTimestamp.Time) > startupTimeout:
			pl.remove[pod.Name] = "not ready after " + startupTimeout.String() + ": " + kube.WaitingReason(pod)
		case nearDeadline(pod, now):
			pl.remove[pod.Name] = "near its active deadline"
		default:
			supply++
		}
	}
	supply += p.exp.pendingCreates(now, seen)
	for name := range pl.remove {
		p.exp.expectDelete(name, now)
	}
	for i := supply; i < p.opts.Size; i++ {
		name := kube.PodName()
		if seen[name] || p.inUse[name] {
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
		}
		return err
	}
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
// counting at once and is deleted off the request path.
func (p *Pool) release(pod *corev1.Pod, why string) {
	p.mu.Lock()
	p.exp.expectDelete(pod.Name, time.Now())
	delete(p.inUse, pod.Name)
	delete(p.gone, pod.Name)
	p.bg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		_ = p.deletePod(ctx, pod.Name, why) // logged; the reconcile retries stale claims
	}()
}
