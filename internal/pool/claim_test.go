package pool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/internal/kube"
)

// stallingWrites is a clientset whose pod writes (create, patch, delete)
// hang once stall is set, as an API server that stopped answering; reads
// and the informer's watch go to the fake.
type stallingWrites struct {
	kubernetes.Interface
	stall *atomic.Bool
}

// IsWatchListSemanticsUnSupported passes on the fake's answer: the informer
// must not wait for a watch-list stream the fake does not send.
func (h stallingWrites) IsWatchListSemanticsUnSupported() bool {
	f, ok := h.Interface.(interface{ IsWatchListSemanticsUnSupported() bool })
	return ok && f.IsWatchListSemanticsUnSupported()
}

func (h stallingWrites) CoreV1() corev1client.CoreV1Interface {
	return stallingCore{h.Interface.CoreV1(), h.stall}
}

type stallingCore struct {
	corev1client.CoreV1Interface
	stall *atomic.Bool
}

func (c stallingCore) Pods(ns string) corev1client.PodInterface {
	return stallingPods{c.CoreV1Interface.Pods(ns), c.stall}
}

type stallingPods struct {
	corev1client.PodInterface
	stall *atomic.Bool
}

func (s stallingPods) hang(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

func (s stallingPods) Create(ctx context.Context, p *corev1.Pod, o metav1.CreateOptions) (*corev1.Pod, error) {
	if s.stall.Load() {
		return nil, s.hang(ctx)
	}
	return s.PodInterface.Create(ctx, p, o)
}

func (s stallingPods) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, o metav1.PatchOptions, sub ...string) (*corev1.Pod, error) {
	if s.stall.Load() {
		return nil, s.hang(ctx)
	}
	return s.PodInterface.Patch(ctx, name, pt, data, o, sub...)
}

func (s stallingPods) Delete(ctx context.Context, name string, o metav1.DeleteOptions) error {
	if s.stall.Load() {
		return s.hang(ctx)
	}
	return s.PodInterface.Delete(ctx, name, o)
}

// TestAnswerNeedsNoAPIServer: with the pool warm, every write to the API
// server hangs from now on, and still requests get their answers at once:
// the claim is decided in memory and its record, the used pod's delete and
// the replacement's create are all off the request path. Before the claim
// was in memory, each request waited on a patch here until the pool wait
// ran out.
func TestAnswerNeedsNoAPIServer(t *testing.T) {
	var stall atomic.Bool
	e := newEnv(t, nil, func(o *Options) {
		o.Client = stallingWrites{o.Client, &stall}
		o.Wait = 3 * time.Second
	}).start()
	e.waitWarm(3)
	stall.Store(true)
	seen := map[string]bool{}
	for i := range 3 {
		start := time.Now()
		res, err := e.execute("print(1)")
		if err != nil {
			t.Fatalf("request %d with the API server hanging: %v", i, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("request %d answered after %s: something on the request path waited for the API server", i, took)
		}
		if seen[res.SandboxID] {
			t.Fatalf("pod %s handed out twice", res.SandboxID)
		}
		seen[res.SandboxID] = true
	}
	// The warm pods are used up and no replacement can be created: the next
	// request waits for the pool wait and gets the documented 503.
	if _, err := e.execute("print(1)"); !errors.Is(err, api.ErrNoCapacity) {
		t.Fatalf("fourth request: err = %v, want api.ErrNoCapacity", err)
	}
	stall.Store(false) // let the shutdown delete what is left
}

// TestClaimRecordedAfterTheJob: the claimed pod gets its claimed-by and
// claimed-at annotations once the job is with its runner (the env's patch
// reactor fails the test for any record written before), and its delete
// comes after the record.
func TestClaimRecordedAfterTheJob(t *testing.T) {
	e := newEnv(t, nil)
	var mu sync.Mutex
	var order []string
	e.cs.PrependReactor("*", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		switch a := a.(type) {
		case k8stesting.PatchAction:
			mu.Lock()
			order = append(order, "patch "+a.GetName()+" "+string(a.GetPatch()))
			mu.Unlock()
		case k8stesting.DeleteAction:
			mu.Lock()
			order = append(order, "delete "+a.GetName())
			mu.Unlock()
		}
		return false, nil, nil
	})
	e.start() // after the reactor: reactors are not safe to add while the informer runs
	e.waitWarm(3)
	res, err := e.execute("x")
	if err != nil {
		t.Fatal(err)
	}
	e.eventually("used pod deleted", func() bool {
		_, err := e.cs.CoreV1().Pods(testNS).Get(context.Background(), res.SandboxID, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	mu.Lock()
	defer mu.Unlock()
	var patched, deleted = -1, -1
	for i, o := range order {
		switch o {
		case "delete " + res.SandboxID:
			deleted = i
		default:
			if strings.HasPrefix(o, "patch "+res.SandboxID+" ") && strings.Contains(o, kube.AnnotationClaimedBy) && strings.Contains(o, kube.AnnotationClaimedAt) {
				patched = i
			}
		}
	}
	if patched < 0 || deleted < patched {
		t.Fatalf("API calls %q: want the claim record of %s, then its delete", order, res.SandboxID)
	}
	if o := order[patched]; strings.Contains(o, `"labels"`) {
		t.Errorf("claim record %q touches the pod's labels: the node's NetworkPolicy engine re-evaluates a pod on each label change", o)
	}
}

// TestConcurrentClaimsOnePodOneJob: many requests claim at once from three
// warm pods with no refill coming: exactly three get a pod, each a different
// one, and the rest the documented 503. Run with -race.
func TestConcurrentClaimsOnePodOneJob(t *testing.T) {
	e := newEnv(t, nil, func(o *Options) { o.Wait = 300 * time.Millisecond }).start()
	e.waitWarm(3)
	e.autoReady.Store(false) // replacements never get Ready
	const n = 24
	var wg sync.WaitGroup
	got := make([]string, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			pod, err := e.pool.claim(context.Background(), time.Now().Add(300*time.Millisecond))
			if err == nil {
				got[i] = pod.Name
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	seen := map[string]int{}
	for i := range n {
		switch {
		case errs[i] == nil:
			if j, dup := seen[got[i]]; dup {
				t.Fatalf("pod %s handed to claims %d and %d", got[i], j, i)
			}
			seen[got[i]] = i
		case !errors.Is(errs[i], api.ErrNoCapacity):
			t.Errorf("claim %d: %v, want a pod or api.ErrNoCapacity", i, errs[i])
		}
	}
	if len(seen) != 3 {
		t.Fatalf("%d claims got a pod, want exactly the 3 warm ones", len(seen))
	}
}

// TestUnavailablePodsNeverHandedOut: a Ready-looking pod that is being
// deleted, that has failed (evicted), that is not Ready or that is near its
// deadline is never claimed. The control at the end shows the same pool
// does hand out a good pod. (A pod this process already handed out:
// TestUsedPodDeletedWhenTheFirstDeleteFails.)
func TestUnavailablePodsNeverHandedOut(t *testing.T) {
	e := newEnv(t, nil, func(o *Options) { o.Size = 4; o.Wait = 200 * time.Millisecond })
	e.autoReady.Store(false)
	e.start()
	e.eventually("4 pods created", func() bool { return len(e.pods()) == 4 })
	pods := e.pods()
	now := metav1.Now()
	old := metav1.NewTime(time.Now().Add(-kube.ActiveDeadlineSeconds * time.Second))
	states := map[string]func(*corev1.Pod){
		"being deleted": func(p *corev1.Pod) { setReady(p); p.DeletionTimestamp = &now },
		"evicted": func(p *corev1.Pod) {
			setReady(p)
			p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Evicted"
		},
		"not ready":         func(p *corev1.Pod) { setReady(p); p.Status.Conditions[0].Status = corev1.ConditionFalse },
		"near its deadline": func(p *corev1.Pod) { setReady(p); p.Status.StartTime = &old },
	}
	names := map[string]string{}
	i := 0
	for what, set := range states {
		name := pods[i].Name
		names[name] = what
		pod, err := e.cs.CoreV1().Pods(testNS).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		set(pod)
		if _, err := e.cs.CoreV1().Pods(testNS).Update(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		i++
	}
	// Each pod went from starting to its state in one update, so it never
	// looked claimable; wait until the informer shows the updates (or that
	// the pool already deleted the pod), or the claims below prove nothing.
	e.eventually("the informer shows every state", func() bool {
		e.pool.mu.Lock()
		defer e.pool.mu.Unlock()
		for name := range names {
			if p, err := e.pool.lister.Get(name); err == nil && p.Status.PodIP == "" {
				return false
			}
		}
		return true
	})
	for range 3 {
		pod, err := e.pool.claim(context.Background(), time.Now().Add(200*time.Millisecond))
		if err == nil {
			t.Fatalf("claimed %s, which is %s", pod.Name, names[pod.Name])
		}
		if !errors.Is(err, api.ErrNoCapacity) {
			t.Fatalf("err = %v, want api.ErrNoCapacity", err)
		}
	}

	// Control: a pod that is simply Ready is handed out.
	var fresh string
	for _, p := range e.pods() {
		if _, bad := names[p.Name]; !bad && p.DeletionTimestamp == nil {
			fresh = p.Name
			break
		}
	}
	if fresh == "" {
		t.Fatal("no replacement pod to use as the control")
	}
	e.updatePod(fresh, setReady)
	pod, err := e.pool.claim(context.Background(), time.Now().Add(5*time.Second))
	if err != nil || pod.Name != fresh {
		t.Fatalf("control: claimed %v, %v; want %s", pod, err, fresh)
	}
}

// TestOtherOwnersPodsNeverTaken: Ready pods of another live replica, of an
// earlier start of this replica that the janitor cannot judge (no
// ownerReference), and of a serve outside the cluster stay where they are,
// untouched, while this pool has nothing Ready of its own.
func TestOtherOwnersPodsNeverTaken(t *testing.T) {
	objs := []runtime.Object{
		ownerPod("serve-1", "serve-1-uid"),
		sandboxPod("sandbox-replica-1", "serve-1", "serve-1-uid", "r1", false),
		sandboxPod("sandbox-replica-2", "serve-1", "serve-1-uid", "r1", false),
		sandboxPod("sandbox-laptop", "laptop", "", "l1", false),
	}
	e := newEnv(t, objs, func(o *Options) {
		o.Wait = 200 * time.Millisecond
		o.Pod.Owner = kube.Owner{Name: "serve-0", Incarnation: "now"} // no UID: cannot judge other incarnations
	})
	e.cs.Tracker().Add(sandboxPod("sandbox-earlier", "serve-0", "", "before", false))
	e.autoReady.Store(false)
	e.start()
	e.eventually("own pods created", func() bool { return e.creates.Load() == 3 })
	if _, err := e.execute("x"); !errors.Is(err, api.ErrNoCapacity) {
		t.Fatalf("err = %v, want api.ErrNoCapacity: only other owners' pods are Ready", err)
	}
	for _, name := range []string{"sandbox-replica-1", "sandbox-replica-2", "sandbox-laptop", "sandbox-earlier"} {
		p, err := e.cs.CoreV1().Pods(testNS).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if kube.IsClaimed(p) {
			t.Errorf("%s was claimed", name)
		}
	}
	if e.jobs.Load() != 0 {
		t.Errorf("%d jobs reached a runner", e.jobs.Load())
	}
}

// TestRestartDoesNotReusePods: the serve container restarts (same pod, same
// UID, a new incarnation) while its earlier start's pods are still there,
// one of them in the middle of a run whose claim was never recorded. None
// of them is handed out; the janitor deletes them all and the new start
// runs on pods of its own.
func TestRestartDoesNotReusePods(t *testing.T) {
	earlier := map[string]bool{}
	var objs []runtime.Object
	objs = append(objs, ownerPod("serve-0", "serve-0-uid"))
	for _, name := range []string{"sandbox-before-1", "sandbox-before-2", "sandbox-before-running"} {
		earlier[name] = true
		objs = append(objs, sandboxPod(name, "serve-0", "serve-0-uid", "before", false))
	}
	e := newEnv(t, objs, func(o *Options) { o.Pod.Owner.Incarnation = "after" }).start()
	for range 4 {
		res, err := e.execute("x")
		if err != nil {
			t.Fatal(err)
		}
		if earlier[res.SandboxID] {
			t.Fatalf("ran in %s, a pod of the earlier start", res.SandboxID)
		}
	}
	for _, p := range e.pods() {
		if earlier[p.Name] {
			t.Errorf("%s of the earlier start is still there", p.Name)
		}
		if p.Name != "serve-0" && p.Labels[kube.LabelIncarnation] != "after" {
			t.Errorf("%s: incarnation %q", p.Name, p.Labels[kube.LabelIncarnation])
		}
	}
}

// TestUsedPodDeletedWhenTheFirstDeleteFails: the used pod's delete is
// refused once; it is deleted on a later pass and never handed out again.
func TestUsedPodDeletedWhenTheFirstDeleteFails(t *testing.T) {
	e := newEnv(t, nil)
	var armed atomic.Bool
	var refused atomic.Int32
	e.cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if armed.Load() && refused.Add(1) == 1 {
			return true, nil, apierrors.NewServiceUnavailable("etcd is briefly away")
		}
		return false, nil, nil
	})
	e.start()
	e.waitWarm(3)
	armed.Store(true)
	res, err := e.execute("x")
	if err != nil {
		t.Fatal(err)
	}
	e.eventually("used pod deleted on a later pass", func() bool {
		_, err := e.cs.CoreV1().Pods(testNS).Get(context.Background(), res.SandboxID, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if refused.Load() < 2 {
		t.Fatalf("deletes = %d, want the refused one and a later one", refused.Load())
	}
	for range 5 {
		r, err := e.execute("x")
		if err != nil {
			t.Fatal(err)
		}
		if r.SandboxID == res.SandboxID {
			t.Fatalf("pod %s handed out twice", res.SandboxID)
		}
	}
}

// TestTwoReplicasNeverShareAPod: two serve replicas' pools in one namespace,
// both taking requests at once: every pod runs at most one job, and each
// replica runs jobs only on pods it made.
func TestTwoReplicasNeverShareAPod(t *testing.T) {
	e := newEnv(t, []runtime.Object{ownerPod("serve-0", "serve-0-uid"), ownerPod("serve-1", "serve-1-uid")})
	var mu sync.Mutex
	madeBy := map[string]string{} // pod -> owner label at create
	e.cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		mu.Lock()
		madeBy[pod.Name] = pod.Labels[kube.LabelOwner]
		mu.Unlock()
		return false, nil, nil
	})
	o := e.pool.opts
	o.Pod.Owner = kube.Owner{Name: "serve-1", UID: "serve-1-uid"}
	other, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	e.start()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- other.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	pools := map[string]*Pool{"serve-0": e.pool, "serve-1": other}
	var wg sync.WaitGroup
	ran := map[string]string{} // pod -> replica that ran a job on it
	for owner, p := range pools {
		for range 12 {
			wg.Go(func() {
				res, err := p.Execute(context.Background(), exec.Job{Code: "x", Timeout: 5 * time.Second})
				if err != nil {
					t.Errorf("%s: %v", owner, err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if prev, dup := ran[res.SandboxID]; dup {
					t.Errorf("pod %s ran a job for %s and for %s", res.SandboxID, prev, owner)
				}
				ran[res.SandboxID] = owner
				if madeBy[res.SandboxID] != owner {
					t.Errorf("%s ran a job on %s, made by %q", owner, res.SandboxID, madeBy[res.SandboxID])
				}
			})
		}
	}
	wg.Wait()
	if len(ran) != 24 {
		t.Fatalf("%d distinct pods for 24 jobs", len(ran))
	}
}

// Pods go to waiting requests in the order the requests came: with every
// waiter woken on each pod event and the first to the lock winning, a
// request could lose race after race under a steady overload and run out
// its wait while later ones were served.
func TestWaitersServedInOrder(t *testing.T) {
	e := newEnv(t, nil, func(o *Options) { o.Max = 3 })
	e.autoReady.Store(false)
	e.start()
	e.eventually("3 pods created", func() bool { return len(e.pods()) == 3 })
	waiting := func() int {
		e.pool.mu.Lock()
		defer e.pool.mu.Unlock()
		return len(e.pool.waiters)
	}
	type served struct {
		request int
		pod     string
	}
	got := make(chan served, 3)
	for i := range 3 {
		go func() {
			res, err := e.execute("x")
			if err != nil {
				t.Errorf("request %d: %v", i, err)
			}
			got <- served{i, res.SandboxID}
		}()
		e.eventually(fmt.Sprintf("%d requests waiting", i+1), func() bool { return waiting() == i+1 })
	}
	for i, pod := range e.pods() {
		e.updatePod(pod.Name, setReady)
		if s := <-got; s != (served{i, pod.Name}) {
			t.Fatalf("pod %s, the %d-th made Ready, went to request %d (it got %q): want request %d", pod.Name, i+1, s.request, s.pod, i)
		}
	}
	if w := waiting(); w != 0 {
		t.Fatalf("%d requests still queued after they were served", w)
	}
}

// A request that arrives while others wait queues behind them, even when a
// pod is there for the first of them.
func TestArrivalDoesNotJumpTheQueue(t *testing.T) {
	e := newEnv(t, nil).start()
	e.waitWarm(3)
	p := e.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	ahead := []*waiter{{}, {}, {}}
	p.waiters = append(p.waiters, ahead...)
	if pod := p.takeLocked(time.Now(), p.queuePosLocked(nil)); pod != nil {
		t.Fatalf("a new request took %s with 3 Ready pods and 3 requests ahead of it", pod.Name)
	}
	if pod := p.takeLocked(time.Now(), p.queuePosLocked(ahead[2])); pod == nil {
		t.Fatal("the third in the queue got no pod with 3 Ready")
	}
	p.leaveLocked(ahead[2])
	if got := p.queuePosLocked(ahead[1]); got != 1 {
		t.Fatalf("the second waiter's position is %d, want 1", got)
	}
	p.waiters = nil
}
