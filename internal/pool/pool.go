// Package pool is the Kubernetes backend of the service: a warm pool of
// one-use sandbox pods. It keeps at least Size pods Ready and unclaimed, more
// under demand (watching them with an informer, never polling), claims one
// per request in memory -- each serve process owns its pods, so no other
// claimer exists -- sends the job straight to the pod's runner, records the
// claim on the pod once the job is there, and deletes the pod afterwards
// while a replacement starts.
package pool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/sandboxd/sandbox/internal/kube"
)

// Defaults and limits of the pool.
const (
	DefaultSize = 3
	DefaultWait = 30 * time.Second

	// resyncPeriod replays the informer's cache to the handlers: it re-runs
	// the reconcile that expires lost expectations and replaces pods stuck
	// starting or near their deadline. It reads the local cache only.
	resyncPeriod = 30 * time.Second

	// startupTimeout is how long a pod may take to become Ready before the
	// pool gives up on it (image pull errors, unschedulable) and replaces it.
	startupTimeout = 3 * time.Minute

	// recycleMargin: a warm pod this close to its activeDeadlineSeconds is
	// replaced rather than handed out, so a run never meets the deadline.
	recycleMargin = 5 * time.Minute

	// maxAttempts bounds how many pods one request tries when runners turn
	// out unreachable before the job reached them.
	maxAttempts = 3

	// redials and redialPause: a runner that cannot be reached is tried
	// again this many times, after redialPause, then twice that, and so on
	// (0.75 s in all), before the request moves to another pod.
	redials     = 4
	redialPause = 50 * time.Millisecond

	// suspectFor: a node where a runner could not be reached at all (no
	// route, or no answer to the connect; not a refusal, which only a live
	// kernel sends) has its pods handed out last for this long. A lost
	// node's pods stay Ready in the API until the node lifecycle
	// controller's verdict, about 40 s after its last heartbeat, and a
	// request handed them one after another would spend its attempts there.
	suspectFor = time.Minute

	// verdictWait bounds how long a broken run waits for the pod's status
	// to say why it died (the kubelet reports an OOM kill within a second or
	// two).
	verdictWait = 10 * time.Second

	// shutdownTimeout bounds the API calls that delete the warm pods when
	// the service stops.
	shutdownTimeout = 20 * time.Second
)

// Options configure a Pool.
type Options struct {
	Client    kubernetes.Interface
	Namespace string
	// Pod is the sandbox pod template's variable part; its Owner identifies
	// this pool (Owner.Name defaults to the host name, Owner.UID adds
	// ownerReferences, Owner.Incarnation is drawn at random when empty).
	Pod  kube.PodOptions
	Size int           // the floor: unclaimed pods always kept; 0 means DefaultSize
	Max  int           // the most unclaimed pods under demand; 0 means DefaultMaxFactor × Size
	Wait time.Duration // how long a request waits for a pod; 0 means DefaultWait

	// Clock drives the warm target's smoothing and hold; nil is the real
	// clock.
	Clock clock.WithTicker

	Logger *slog.Logger // nil: slog.Default()

	// HTTPClient talks to the runners; nil builds one whose dial errors are
	// recognised as "job not delivered". Tests may set Dialer instead.
	HTTPClient *http.Client
	Dialer     DialFunc
}

// Pool is a warm pool of sandbox pods. It implements server.Backend and
// server.MetricsRegisterer.
type Pool struct {
	opts    Options
	log     *slog.Logger
	client  kubernetes.Interface
	m       *metrics
	claimer string // value of the owner label and claimed-by annotation
	http    *http.Client
	dial    DialFunc // opts.Dialer, or dialPod: also the overdue run's reachability probe
	clock   clock.WithTicker

	informer cache.SharedIndexInformer
	lister   corelisters.PodNamespaceLister
	// selector is this pool's pods (kube.PoolSelector). The informer asks
	// the API server for these only, and every read of its cache applies it
	// again, so that a watch that ever sent more (the fake clientset's does)
	// could not hand out, count or delete another pool's pod.
	selector labels.Selector
	factory  informers.SharedInformerFactory

	kick    chan struct{} // wakes the reconcile loop; capacity 1, coalescing
	started chan struct{} // closed when the cache synced and the janitor ran

	stopping chan struct{} // closed when shutdown begins
	stopOnce sync.Once

	mu            sync.Mutex
	exp           *expectations
	inUse         map[string]time.Time     // pods claimed and not yet released -> when claimed
	spent         map[string]bool          // every pod this process handed out, until it is gone
	recording     map[string]chan struct{} // claims being written to their pod; closed when done
	gone          map[string]*corev1.Pod   // last state of in-use pods deleted mid-run
	targeter      *targeter
	waiters       []*waiter            // requests waiting for a pod, oldest first: served in that order
	createdAt     map[string]time.Time // for the create-to-Ready histogram
	wasReady      map[string]bool      // pods seen Ready: one that is not any more is lost, not starting
	suspect       map[string]time.Time // node -> until when its pods go last (suspectFor)
	unschedulable map[string]bool      // pods already reported as unschedulable
	changed       chan struct{}        // closed and replaced on every pod event
	closing       bool                 // shutdown began: no new claims
	empty         bool                 // no warm pod at the last event: logged on each change
	unsealed      *sealFault           // the pods' runners cannot prove their seal (see seal.go)
	apiDown       *apiFault            // calls to the API server fail unanswered (see apiaway.go)
	lastProof     time.Time            // when a new pod last became Ready: proved its seal
	sealGrace     time.Duration        // sealGrace; tests shorten it
	sealEvery     time.Duration        // sealCheckEvery; tests shorten it
	inflight      sync.WaitGroup       // executions under way
	bg            sync.WaitGroup       // deletes off the request path
}

// New checks the options and builds a Pool; Run starts it.
func New(o Options) (*Pool, error) {
	if o.Client == nil {
		return nil, errors.New("pool: no kubernetes client")
	}
	if o.Namespace == "" {
		return nil, errors.New("pool: no namespace")
	}
	if o.Pod.Image == "" {
		return nil, errors.New("pool: no image")
	}
	if o.Pod.Owner.Name == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "sandbox-serve"
		}
		o.Pod.Owner.Name = host
	}
	if o.Size < 0 {
		return nil, fmt.Errorf("pool: size %d is negative", o.Size)
	}
	if o.Size == 0 {
		o.Size = DefaultSize
	}
	if o.Max == 0 {
		o.Max = DefaultMaxFactor * o.Size
	}
	if o.Max < o.Size {
		return nil, fmt.Errorf("pool: max %d is below the size %d", o.Max, o.Size)
	}
	if o.Pod.Owner.Incarnation == "" {
		o.Pod.Owner.Incarnation = newIncarnation()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Wait <= 0 {
		o.Wait = DefaultWait
	}
	if o.Pod.RunnerPort == 0 {
		o.Pod.RunnerPort = kube.DefaultRunnerPort
	}
	o.Pod.Namespace = o.Namespace
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	m := newMetrics()
	m.target.Set(float64(o.Size))
	m.floor.Set(float64(o.Size))
	m.max.Set(float64(o.Max))
	m.startEstimate.Set(initialStart.Seconds())
	for _, r := range []string{reasonRate, reasonWaiting, reasonCapped, reasonIdle} {
		m.targetChanges.WithLabelValues(r) // shown at 0 before the first move
	}

	p := &Pool{
		opts:          o,
		log:           o.Logger.With("component", "pool", "namespace", o.Namespace, "owner", o.Pod.Owner.Name, "incarnation", o.Pod.Owner.Incarnation),
		client:        o.Client,
		m:             m,
		claimer:       kube.LabelValue(o.Pod.Owner.Name),
		http:          o.HTTPClient,
		clock:         o.Clock,
		kick:          make(chan struct{}, 1),
		started:       make(chan struct{}),
		stopping:      make(chan struct{}),
		exp:           newExpectations(),
		inUse:         map[string]time.Time{},
		spent:         map[string]bool{},
		recording:     map[string]chan struct{}{},
		gone:          map[string]*corev1.Pod{},
		targeter:      newTargeter(o.Size, o.Max),
		createdAt:     map[string]time.Time{},
		wasReady:      map[string]bool{},
		suspect:       map[string]time.Time{},
		unschedulable: map[string]bool{},
		changed:       make(chan struct{}),
		empty:         true, // nothing to report until the first pod is Ready
		sealGrace:     sealGrace,
		sealEvery:     sealCheckEvery,
	}
	if p.dial = o.Dialer; p.dial == nil {
		p.dial = dialPod
	}
	if p.http == nil {
		p.http = newPodClient(p.dial)
	}

	// Watch only this pool's pods -- this owner's, made by this process --
	// so no pod of another replica, or of an earlier start of this one, can
	// ever be handed out here. The janitor looks at the others once.
	p.selector = kube.PoolSelector(o.Pod.Owner)
	selector := p.selector.String()
	p.factory = informers.NewSharedInformerFactoryWithOptions(o.Client, resyncPeriod,
		informers.WithNamespace(o.Namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = selector }))
	pods := p.factory.Core().V1().Pods()
	p.informer = pods.Informer()
	p.lister = pods.Lister().Pods(o.Namespace)
	if _, err := p.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.onPod(obj, false) },
		UpdateFunc: func(_, obj any) { p.onPod(obj, false) },
		DeleteFunc: func(obj any) { p.onPod(obj, true) },
	}); err != nil {
		return nil, fmt.Errorf("pool: watch pods: %w", err)
	}
	if err := p.informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		p.noteAPIError(err)
		cache.DefaultWatchErrorHandler(ctx, r, err)
	}); err != nil {
		return nil, fmt.Errorf("pool: watch pods: %w", err)
	}
	return p, nil
}

// Run keeps the pool filled until ctx ends, then shuts down gracefully: it
// stops claiming, waits for the executions in flight, deletes its warm pods
// and returns. It is called once.
func (p *Pool) Run(ctx context.Context) error {
	// The informer outlives ctx: runs in flight still need it during shutdown.
	infCtx, stopInformer := context.WithCancel(context.Background())
	defer func() {
		stopInformer()
		p.factory.Shutdown()
	}()
	p.factory.StartWithContext(infCtx)
	if !cache.WaitForCacheSync(ctx.Done(), p.informer.HasSynced) {
		p.shutdown()
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("pool: pod informer did not sync")
	}
	p.log.Info("pool watching pods", "size", p.opts.Size, "max", p.opts.Max, "image", p.opts.Pod.Image, "runtime_class", p.opts.Pod.RuntimeClass)

	// The janitor runs before the first claim, so it can never take a claim
	// of this process for a stale one.
	if err := p.janitor(ctx); err != nil {
		p.log.Warn("janitor failed; leaving cleanup to the garbage collector and activeDeadlineSeconds", "err", err)
	}
	close(p.started)

	loopCtx, stopLoop := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	loops.Go(func() { p.reconcileLoop(loopCtx) })
	loops.Go(func() { p.sealLoop(loopCtx) })
	p.poke()

	<-ctx.Done()
	p.beginShutdown()
	stopLoop()
	loops.Wait() // no create can start after this
	p.shutdown()
	return nil
}

// shutdown waits for runs in flight and deletes the pool's remaining pods.
func (p *Pool) shutdown() {
	p.beginShutdown()
	p.inflight.Wait()
	p.bg.Wait()

	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	names := map[string]bool{}
	pods, _ := p.lister.List(p.selector)
	for _, pod := range pods {
		if pod.DeletionTimestamp == nil {
			names[pod.Name] = true
		}
	}
	p.mu.Lock()
	for _, n := range p.exp.createNames() {
		names[n] = true
	}
	p.mu.Unlock()
	// Count what really went: after a forced delete of the serve pod its
	// token is already void, and the garbage collector cleans up instead.
	var wg sync.WaitGroup
	var failed atomic.Int64
	for name := range names {
		wg.Go(func() {
			if p.deletePod(ctx, name, "shutdown") != nil {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	p.log.Info("pool stopped", "deleted_pods", int64(len(names))-failed.Load(), "failed_deletes", failed.Load())
}

// beginShutdown refuses new claims and wakes every waiting request.
func (p *Pool) beginShutdown() {
	p.mu.Lock()
	p.closing = true
	p.broadcastLocked()
	p.mu.Unlock()
	p.stopOnce.Do(func() { close(p.stopping) })
}

// Ready reports whether this process can take a request: the informer's
// cache synced, the janitor ran, and shutdown has not begun. It backs
// /readyz, and so the Service's endpoints. It deliberately ignores whether a
// warm pod exists right now: an empty pool is the normal state under load,
// and a request that finds it empty waits up to Options.Wait and then gets
// the documented 503, while an endpoint pulled from the Service would refuse
// every client outright. The pool's supply is the ready gauge and a log line.
func (p *Pool) Ready() bool {
	select {
	case <-p.started:
	default:
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closing
}

// onPod is the informer's handler for every add, update and delete.
func (p *Pool) onPod(obj any, deleted bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok || !p.selector.Matches(labels.Set(pod.Labels)) {
		return
	}
	p.mu.Lock()
	p.noteAPIOKLocked()
	if deleted {
		p.exp.observedGone(pod.Name)
		delete(p.createdAt, pod.Name)
		delete(p.unschedulable, pod.Name)
		delete(p.wasReady, pod.Name)
		if _, ok := p.inUse[pod.Name]; ok {
			p.gone[pod.Name] = pod
		} else {
			delete(p.spent, pod.Name)
		}
	} else {
		p.exp.observed(pod.Name)
		if kube.IsReady(pod) {
			p.wasReady[pod.Name] = true
		}
		if at, ok := p.createdAt[pod.Name]; ok && kube.IsReady(pod) {
			p.clearSealFaultLocked() // a new pod proved its egress cut
			p.lastProof = time.Now()
			delete(p.createdAt, pod.Name)
			took := time.Since(at)
			p.m.podStartup.Observe(took.Seconds())
			p.targeter.started(took)
			p.m.startEstimate.Set(p.targeter.start)
			p.log.Debug("pod ready", "pod", pod.Name, "startup", took)
		}
		if _, used := p.inUse[pod.Name]; !used {
			p.noteGaveUpLocked(pod)
		}
		if msg := kube.Unschedulable(pod); msg != "" && !p.unschedulable[pod.Name] {
			p.unschedulable[pod.Name] = true
			p.log.Warn("sandbox pod cannot be scheduled; the pool stays short until it can (on small nodes, lower --pod-cpu-request)",
				"pod", pod.Name, "reason", msg)
		}
	}
	ready := p.readyCountLocked()
	p.m.ready.Set(float64(ready))
	if empty := ready == 0; empty != p.empty {
		p.empty = empty
		if empty {
			p.log.Info("warm pool empty: requests wait for a refill, up to the pool wait", "target", p.targeter.target)
		} else {
			p.log.Info("warm pool has a ready pod again", "ready", ready, "target", p.targeter.target)
		}
	}
	p.broadcastLocked()
	p.mu.Unlock()
	p.poke()
}

// broadcastLocked wakes everyone waiting for a pod event.
func (p *Pool) broadcastLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// poke asks the reconcile loop for a pass; passes coalesce.
func (p *Pool) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// available reports whether pod can be handed out now.
func (p *Pool) availableLocked(pod *corev1.Pod, now time.Time) bool {
	return p.liveLocked(pod) && kube.IsReady(pod) && !nearDeadline(pod, now)
}

// liveLocked reports whether pod is this pool's supply: never handed out,
// not going away, not finished.
func (p *Pool) liveLocked(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && !kube.IsFinished(pod) &&
		!kube.IsClaimed(pod) && !p.spent[pod.Name] && !p.exp.deleting(pod.Name)
}

func (p *Pool) readyCountLocked() int {
	pods, _ := p.lister.List(p.selector)
	now := time.Now()
	n := 0
	for _, pod := range pods {
		if p.availableLocked(pod, now) {
			n++
		}
	}
	return n
}

// nearDeadline reports a pod too close to its activeDeadlineSeconds to start
// a run.
func nearDeadline(pod *corev1.Pod, now time.Time) bool {
	if pod.Spec.ActiveDeadlineSeconds == nil || pod.Status.StartTime == nil {
		return false
	}
	end := pod.Status.StartTime.Add(time.Duration(*pod.Spec.ActiveDeadlineSeconds) * time.Second)
	return now.After(end.Add(-recycleMargin))
}

// newIncarnation names one start of this process: ten hex digits, a valid
// label value.
func newIncarnation() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b) // never fails on Linux
	return hex.EncodeToString(b)
}
