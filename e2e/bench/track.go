package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/sandboxd/sandbox/internal/kube"
)

// seen is what the tracker saw of one pod, with the bench's clock: when the
// watch first showed it, and when first Ready.
type seen struct {
	owner   string // the owner label (sandbox pods)
	added   time.Time
	ready   time.Time
	claimed bool // claim recorded, or going away
	gone    bool
	// failed: its container never started (kube.NeverStarted).
	failed bool
}

// tracker watches pods matching a selector in one namespace and keeps, per
// pod, when it appeared and when it got Ready. Its clock is the bench's:
// create-to-Ready as an informer sees it, like the pool's own metric.
type tracker struct {
	mu      sync.Mutex
	pods    map[string]*seen
	changed chan struct{}
	stop    func()
}

func newTracker(ctx context.Context, cs kubernetes.Interface, ns string, sel labels.Selector) (*tracker, error) {
	tr := &tracker{pods: map[string]*seen{}, changed: make(chan struct{})}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel.String() }))
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { tr.saw(o, false) },
		UpdateFunc: func(_, o any) { tr.saw(o, false) },
		DeleteFunc: func(o any) { tr.saw(o, true) },
	}); err != nil {
		return nil, err
	}
	ictx, cancel := context.WithCancel(ctx)
	f.Start(ictx.Done())
	tr.stop = func() { cancel(); f.Shutdown() }
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		tr.stop()
		return nil, fmt.Errorf("watch pods %s in %s: cache never synced", sel, ns)
	}
	return tr, nil
}

func (tr *tracker) saw(o any, deleted bool) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	s := tr.pods[p.Name]
	if s == nil {
		s = &seen{owner: p.Labels[kube.LabelOwner], added: now}
		tr.pods[p.Name] = s
	}
	if s.ready.IsZero() && kube.IsReady(p) {
		s.ready = now
	}
	s.claimed = s.claimed || kube.IsClaimed(p) || p.DeletionTimestamp != nil || kube.IsFinished(p)
	s.gone = s.gone || deleted
	s.failed = s.failed || kube.NeverStarted(p)
	close(tr.changed)
	tr.changed = make(chan struct{})
}

// used marks the pods that answered samples as claimed. serve records a
// claim on the pod only after handing it its job, so the watch can show a
// used pod as warm until then, and a round started on that count would
// find its replica short.
func (tr *tracker) used(samples []Sample) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, x := range samples {
		if s := tr.pods[x.ID]; s != nil {
			s.claimed = true
		}
	}
}

// warm counts owner's pods that are Ready and unclaimed, and live ones
// (unclaimed, Ready or starting).
func (tr *tracker) counts(owner string) (warm, live int) {
	for _, s := range tr.pods {
		if s.owner != owner || s.gone || s.claimed {
			continue
		}
		live++
		if !s.ready.IsZero() {
			warm++
		}
	}
	return warm, live
}

// waitUntil waits until cond (called under the lock) holds, and returns the
// time it first saw it hold.
func (tr *tracker) waitUntil(ctx context.Context, timeout time.Duration, what string, cond func() bool) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		tr.mu.Lock()
		ok := cond()
		ch := tr.changed
		tr.mu.Unlock()
		if ok {
			return time.Now(), nil
		}
		select {
		case <-ch:
		case <-time.After(time.Second): // conditions on the clock (held for a while)
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("waiting %s for %s: %w", timeout, what, ctx.Err())
		}
	}
}

// get returns a copy of what was seen of name.
func (tr *tracker) get(name string) (seen, bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	s, ok := tr.pods[name]
	if !ok {
		return seen{}, false
	}
	return *s, true
}

// startups lists the create-to-Ready times of the pods first seen after
// since, in milliseconds.
func (tr *tracker) startups(since time.Time) []float64 {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []float64
	for _, s := range tr.pods {
		if s.added.After(since) && !s.ready.IsZero() {
			out = append(out, float64(s.ready.Sub(s.added).Microseconds())/1000)
		}
	}
	return out
}

// waitGone waits until every pod the tracker has seen is gone.
func (tr *tracker) waitGone(ctx context.Context) error {
	_, err := tr.waitUntil(ctx, 2*time.Minute, "every pod it saw gone", func() bool {
		for _, s := range tr.pods {
			if !s.gone {
				return false
			}
		}
		return true
	})
	return err
}
