//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/klient/wait/conditions"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/e2e/kindenv"
	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/wire"
)

// Deadlines of the pool tests. A sandbox pod takes a few seconds from create
// to Ready on the 2-CPU kind node, several at once somewhat longer.
const (
	// refillDeadline: the pool has its floor of warm pods again after a
	// claim.
	refillDeadline = 90 * time.Second
	// verdictDeadline: a run whose pod was deleted is answered within this of
	// the delete (the pool waits at most 10 s for the pod's status).
	verdictDeadline = 15 * time.Second
	// gcDeadline: a dead serve pod's sandbox pods are gone.
	gcDeadline = 2 * time.Minute
	// newServeDeadline: a replacement serve pod is Ready with a full pool.
	newServeDeadline = 3 * time.Minute
)

// poolPods lists the sandbox pods whose pool belongs to serve pod owner.
func poolPods(ctx context.Context, cs kubernetes.Interface, owner string) ([]corev1.Pod, error) {
	l, err := cs.CoreV1().Pods(kindenv.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: kube.OwnerSelector(owner).String()})
	if err != nil {
		return nil, fmt.Errorf("list sandbox pods of %s: %w", owner, err)
	}
	return l.Items, nil
}

// supply counts a pool's pods as the pool should: warm are Ready and
// unclaimed, live are unclaimed and not going away (warm or starting). A pod
// whose claim is not recorded yet (a moment after its job reached it)
// counts as unclaimed.
func supply(pods []corev1.Pod) (warm, live int) {
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || kube.IsFinished(p) || kube.IsClaimed(p) {
			continue
		}
		live++
		if kube.IsReady(p) {
			warm++
		}
	}
	return warm, live
}

// poolSize is a pool's warm target's floor (--pool-size) and bound
// (--pool-max). Between the two the target follows demand.
type poolSize struct{ floor, max int }

// waitWarm waits until owner's pool has at least its floor of warm pods
// (more while a grown target has not shrunk back). Meanwhile it fails the
// test if the pool ever keeps more than its bound of unclaimed pods: it must
// never over-create, nor let demand take it past --pool-max.
func waitWarm(ctx context.Context, t *testing.T, cs kubernetes.Interface, owner string, size poolSize, deadline time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var warm, live, most int
	err := wait.For(func(ctx context.Context) (bool, error) {
		pods, err := poolPods(ctx, cs, owner)
		if err != nil {
			return false, err
		}
		warm, live = supply(pods)
		most = max(most, live)
		return warm >= size.floor, nil
	}, wait.WithContext(ctx), wait.WithTimeout(deadline), wait.WithInterval(250*time.Millisecond))
	if err != nil {
		t.Fatalf("pool of %s: %d warm of at least %d (%d unclaimed) after %s: %v", owner, warm, size.floor, live, deadline, err)
	}
	if most > size.max {
		t.Errorf("pool of %s over-created: %d unclaimed pods at once, bound %d", owner, most, size.max)
	}
	return time.Since(start)
}

// poolTarget reads the pool's floor and bound from the service's /metrics.
func poolTarget(ctx context.Context, t *testing.T, base string) poolSize {
	t.Helper()
	m := metricValues(ctx, t, base, "sandbox_pool_min_pods", "sandbox_pool_max_pods")
	size := poolSize{floor: int(m["sandbox_pool_min_pods"]), max: int(m["sandbox_pool_max_pods"])}
	if size.floor < 1 || size.max < size.floor {
		t.Fatalf("/metrics: pool floor %d, bound %d", size.floor, size.max)
	}
	return size
}

// metricValues reads the named unlabelled samples from base's /metrics.
func metricValues(ctx context.Context, t *testing.T, base string, names ...string) map[string]float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		for _, name := range names {
			if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					t.Fatalf("/metrics: %s %q", name, v)
				}
				out[name] = f
			}
		}
	}
	for _, name := range names {
		if _, ok := out[name]; !ok {
			t.Fatalf("/metrics has no %s (%v)", name, sc.Err())
		}
	}
	return out
}

// reply is one answer of POST /v1/execute as the client saw it: a result,
// or the service's error.
type reply struct {
	res  wire.Result
	err  *client.Error // nil when the service answered with a result
	took time.Duration
}

// status is the answer's HTTP status.
func (r reply) status() int {
	if r.err != nil {
		return r.err.StatusCode
	}
	return http.StatusOK
}

// errorMsg is the service's error message, "" for a result.
func (r reply) errorMsg() string {
	if r.err != nil {
		return r.err.Message
	}
	return ""
}

func (r reply) String() string {
	what := fmt.Sprintf("exit %d, stdout %q, stderr %q", r.res.ExitCode, clipOut(r.res.Stdout), clipOut(r.res.Stderr))
	if r.err != nil {
		what = r.err.Message
	}
	return fmt.Sprintf("%d after %s: %s", r.status(), r.took.Round(time.Millisecond), what)
}

// post sends one execution and returns whatever answered, without the
// retries of execute: these tests judge the answer itself. It does not call
// t, so a goroutine may use it.
func post(ctx context.Context, base, code string, timeoutS int) (reply, error) {
	return postRequest(ctx, base, wire.ExecuteRequest{Code: code, TimeoutS: &timeoutS})
}

// postRequest is post for a whole request (files, outputs).
func postRequest(ctx context.Context, base string, req wire.ExecuteRequest) (reply, error) {
	cl, err := client.New(base)
	if err != nil {
		return reply{}, err
	}
	start := time.Now()
	res, err := cl.Execute(ctx, req)
	r := reply{res: res, took: time.Since(start)}
	if errors.As(err, &r.err) {
		return r, nil
	}
	if err != nil {
		return reply{}, fmt.Errorf("POST /v1/execute: %w", err)
	}
	return r, nil
}

// poolKey holds the serve pod a pool test talks to.
type poolKey struct{}

type poolEnv struct {
	base   string   // forwarded URL of the serve pod
	owner  string   // its name: the owner of its sandbox pods
	target poolSize // its pool's floor and bound
	cs     kubernetes.Interface
}

func poolOf(ctx context.Context) poolEnv { return ctx.Value(poolKey{}).(poolEnv) }

// withFullPool forwards to the Ready serve pod and waits until its pool has
// its floor of warm pods, so each test starts from a full pool whatever ran
// before.
func withFullPool(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
	base, owner := forwardToServe(ctx, t, cfg, podReady)
	pe := poolEnv{base: base, owner: owner, target: poolTarget(ctx, t, base), cs: clientset(ctx, t)}
	waitWarm(ctx, t, pe.cs, pe.owner, pe.target, refillDeadline)
	return context.WithValue(ctx, poolKey{}, pe)
}

func TestPoolRefill(t *testing.T) {
	f := features.New("the pool refills to its target after an execution").
		WithLabel("needs", "service").
		Setup(withFullPool).
		Assess("the floor of warm pods again and the used pod gone", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			pe := poolOf(ctx)
			res := execute(ctx, t, pe.base, hostnameCode, 20)
			if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != res.SandboxID {
				t.Fatalf("exit %d, stdout %q, sandbox_id %q", res.ExitCode, res.Stdout, res.SandboxID)
			}
			took := waitWarm(ctx, t, pe.cs, pe.owner, pe.target, refillDeadline)
			used := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: res.SandboxID, Namespace: kindenv.Namespace}}
			err := wait.For(conditions.New(cfg.Client().Resources()).ResourceDeleted(used),
				wait.WithContext(ctx), wait.WithTimeout(refillDeadline), wait.WithInterval(250*time.Millisecond))
			if err != nil {
				t.Fatalf("used pod %s not deleted: %v", res.SandboxID, err)
			}
			t.Logf("ran in %s; %d warm pods again %s after the answer; %s is gone",
				res.SandboxID, pe.target.floor, took.Round(time.Millisecond), res.SandboxID)
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// emptyPool redeploys serve with a pool that never has a Ready pod (the
// never-ready weakening), so its one pod stays Running and not Ready.
// (--pool-size 0 is refused by serve.)
var emptyPool = serveChange{
	args:     []string{"--pool-size=1", "--pool-wait=2s", "--weaken=never-ready"},
	coldPool: true,
}

const (
	emptyPoolWait = 2 * time.Second
	noCapacityMsg = "no warm sandbox pod available, try again shortly"
)

func TestPoolEmpty503(t *testing.T) {
	f := features.New("an empty pool answers 503 with Retry-After after --pool-wait").
		WithLabel("needs", "service").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if err := ServiceErr(ctx); err != nil {
				t.Fatal(err)
			}
			ctx = context.WithValue(ctx, restoreKey{}, weaken(ctx, t, emptyPool))
			running := func(p corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }
			base, owner := forwardToServe(ctx, t, cfg, running)
			return context.WithValue(ctx, poolKey{}, poolEnv{base: base, owner: owner, cs: clientset(ctx, t)})
		}).
		Assess("503, Retry-After and the message after the wait", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			pe := poolOf(ctx)
			pods, err := poolPods(ctx, pe.cs, pe.owner)
			if err != nil {
				t.Fatal(err)
			}
			if warm, live := supply(pods); len(pods) == 0 || warm != 0 || live == 0 {
				t.Fatalf("pool of %s: %d pods, %d warm, %d unclaimed; want only pods that never get Ready", pe.owner, len(pods), warm, live)
			}
			r, err := post(ctx, pe.base, `print("never runs")`, 10)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("answer: %s", r)
			if r.status() != http.StatusServiceUnavailable {
				t.Errorf("status %d, want 503", r.status())
			}
			if r.err == nil || r.err.RetryAfter < time.Second {
				t.Errorf("answer %s: want Retry-After of at least a second", r)
			}
			if msg := r.errorMsg(); msg != noCapacityMsg {
				t.Errorf("error %q, want %q", msg, noCapacityMsg)
			}
			if r.took < emptyPoolWait || r.took > 5*time.Second {
				t.Errorf("answered after %s, want after the %s wait and within 5 s", r.took, emptyPoolWait)
			}
			// An empty pool must not take serve out of its Service: the
			// clients the Service sends it wait and get this 503, where an
			// unready endpoint would refuse them outright.
			srv, err := pe.cs.CoreV1().Pods(kindenv.Namespace).Get(ctx, pe.owner, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !podReady(*srv) {
				t.Errorf("serve pod %s is not Ready with an empty pool: the Service would refuse its clients", pe.owner)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			if restore, ok := ctx.Value(restoreKey{}).(func()); ok {
				restore()
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// ownedBy reports whether a sandbox pod belongs to the serve pod name/uid,
// by label or by ownerReference.
func ownedBy(p *corev1.Pod, name string, uid types.UID) bool {
	if p.Labels[kube.LabelOwner] == kube.LabelValue(name) {
		return true
	}
	for _, r := range p.OwnerReferences {
		if r.UID == uid {
			return true
		}
	}
	return false
}

func TestPoolServeDies(t *testing.T) {
	f := features.New("a dead serve pod leaves no sandbox pods behind").
		WithLabel("needs", "service").
		Setup(withFullPool).
		Assess("its pods are collected and the new serve pod fills its own pool", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			pe := poolOf(ctx)
			pods := pe.cs.CoreV1().Pods(kindenv.Namespace)
			old, err := pods.Get(ctx, pe.owner, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			mine, err := poolPods(ctx, pe.cs, old.Name)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range mine {
				refs := p.OwnerReferences
				if len(refs) != 1 || refs[0].Kind != "Pod" || refs[0].Name != old.Name || refs[0].UID != old.UID {
					t.Errorf("sandbox pod %s: ownerReferences %+v, want the serve pod %s (uid %s)", p.Name, refs, old.Name, old.UID)
				}
			}

			// The replacement is told by what existed before: creation
			// timestamps are whole seconds, and the ReplicaSet can make it
			// in the second before the delete's answer reaches us.
			before, err := servePods(ctx, pe.cs)
			if err != nil {
				t.Fatal(err)
			}
			existed := map[types.UID]bool{}
			for _, p := range before {
				existed[p.UID] = true
			}

			// Grace 0: the pod object goes at once, as after a node loss,
			// and its bound service-account token with it, so the dying
			// serve's own shutdown cannot delete its pods (its deletes get
			// Unauthorized): the garbage collector (and the next serve's
			// janitor) must.
			zero := int64(0)
			if err := pods.Delete(ctx, old.Name, metav1.DeleteOptions{
				GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &old.UID}}); err != nil {
				t.Fatalf("delete serve pod %s: %v", old.Name, err)
			}
			start := time.Now()
			var left []string
			err = wait.For(func(ctx context.Context) (bool, error) {
				l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: kube.RunnerSelector().String()})
				if err != nil {
					return false, err
				}
				left = left[:0]
				for i := range l.Items {
					if ownedBy(&l.Items[i], old.Name, old.UID) {
						left = append(left, l.Items[i].Name)
					}
				}
				return len(left) == 0, nil
			}, wait.WithContext(ctx), wait.WithTimeout(gcDeadline), wait.WithInterval(250*time.Millisecond))
			if err != nil {
				t.Fatalf("pods of the dead serve %s remain after %s: %v: %v", old.Name, gcDeadline, left, err)
			}
			t.Logf("the %d sandbox pods of %s were gone %s after it", len(mine), old.Name, time.Since(start).Round(time.Millisecond))

			// The replacement, not the other replica that was there all along.
			newer := func(p corev1.Pod) bool {
				return !existed[p.UID] && podReady(p)
			}
			_, owner := forwardToServe(ctx, t, cfg, newer)
			took := waitWarm(ctx, t, pe.cs, owner, pe.target, newServeDeadline)
			srv, err := pods.Get(ctx, owner, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			fresh, err := poolPods(ctx, pe.cs, owner)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range fresh {
				if !ownedBy(&p, srv.Name, srv.UID) || len(p.OwnerReferences) != 1 || p.OwnerReferences[0].UID != srv.UID {
					t.Errorf("sandbox pod %s of the new serve %s: ownerReferences %+v", p.Name, owner, p.OwnerReferences)
				}
			}
			l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: kube.RunnerSelector().String()})
			if err != nil {
				t.Fatal(err)
			}
			for i := range l.Items {
				if ownedBy(&l.Items[i], old.Name, old.UID) {
					t.Errorf("sandbox pod %s of the dead serve %s is back", l.Items[i].Name, old.Name)
				}
			}
			t.Logf("new serve pod %s has %d warm pods of its own, %s after Ready", owner, pe.target.floor, took.Round(time.Millisecond))
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
