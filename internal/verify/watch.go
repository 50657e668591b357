package verify

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/sandboxd/sandbox/internal/kube"
)

// snippetSelector selects the snippet pods by the labels the pool gives them.
var snippetSelector = kube.RunnerSelector().String()

// seenPod is what the watch learnt about one snippet pod.
type seenPod struct {
	Name    string
	UID     types.UID
	Node    string
	IP      string
	Created time.Time
	Claimed time.Time // when the watch first saw the claim recorded
	Deleted time.Time // when the watch saw it go; zero while it exists
}

// podWatch follows the snippet pods of the namespace from before the first
// execution, so that a pod's UID is known even when the service deletes the
// pod a few milliseconds after it answered.
type podWatch struct {
	mu   sync.Mutex
	pods map[string]*seenPod // by name; a name is never reused within a run
	stop context.CancelFunc
	wg   sync.WaitGroup
	inf  cache.SharedIndexInformer
}

func watchSnippetPods(ctx context.Context, cs kubernetes.Interface, ns string) (*podWatch, error) {
	return watchPods(ctx, cs, ns, snippetSelector)
}

// watchPods follows the pods of ns that selector selects (the tool-call
// checks watch the tool pods with it).
func watchPods(ctx context.Context, cs kubernetes.Interface, ns, selector string) (*podWatch, error) {
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	w := &podWatch{pods: map[string]*seenPod{}, inf: f.Core().V1().Pods().Informer()}
	_, err := w.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.saw(o, false) },
		UpdateFunc: func(_, o any) { w.saw(o, false) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			w.saw(o, true)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("watch pods %s: %w", selector, err)
	}
	wctx, stop := context.WithCancel(ctx)
	w.stop = stop
	w.wg.Add(1)
	go func() { defer w.wg.Done(); w.inf.RunWithContext(wctx) }()
	if !cache.WaitForCacheSync(wctx.Done(), w.inf.HasSynced) {
		w.Close()
		return nil, fmt.Errorf("watch snippet pods in %s: cache never synced", ns)
	}
	return w, nil
}

func (w *podWatch) saw(o any, deleted bool) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.pods[p.Name]
	if s == nil || s.UID != p.UID {
		s = &seenPod{Name: p.Name, UID: p.UID, Created: p.CreationTimestamp.Time}
		w.pods[p.Name] = s
	}
	if p.Spec.NodeName != "" {
		s.Node = p.Spec.NodeName
	}
	if p.Status.PodIP != "" {
		s.IP = p.Status.PodIP
	}
	if kube.IsClaimed(p) && s.Claimed.IsZero() {
		s.Claimed = time.Now()
	}
	if deleted && s.Deleted.IsZero() {
		s.Deleted = time.Now()
	}
}

// Get returns a copy of what is known about the named pod.
func (w *podWatch) Get(name string) (seenPod, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.pods[name]
	if !ok {
		return seenPod{}, false
	}
	return *s, true
}

// WaitDeleted waits until the named pod is gone or ctx ends; it returns when
// the watch saw it go.
func (w *podWatch) WaitDeleted(ctx context.Context, name string) (time.Time, error) {
	for {
		if s, ok := w.Get(name); ok && !s.Deleted.IsZero() {
			return s.Deleted, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Claims counts the pods seen claimed since t; -1 without a watch.
func (w *podWatch) Claims(since time.Time) int {
	if w == nil {
		return -1
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, s := range w.pods {
		if !s.Claimed.IsZero() && s.Claimed.After(since) {
			n++
		}
	}
	return n
}

// Close stops the watch and waits for it.
func (w *podWatch) Close() {
	w.stop()
	w.wg.Wait()
}
