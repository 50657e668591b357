//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/sandboxd/sandbox/e2e/kindenv"
	"github.com/sandboxd/sandbox/internal/kube"
)

// Deadlines of the fail-closed tests. serve asks a pod why after it ran
// unproven for 20 s (every 3 s); a pod serve cannot reach tells it by ending
// after 30 s unproven.
const (
	// unsealedNoticeDeadline: serve answers the 503 within this of the cut.
	unsealedNoticeDeadline = 90 * time.Second
	// neverReadyWindow: no snippet pod made after the cut may be Ready
	// during this long (several times what a proof takes).
	neverReadyWindow = 30 * time.Second
	// resealDeadline: every serve pod's pool has a Ready pod again after
	// the network is restored.
	resealDeadline = 3 * time.Minute
)

// removePolicies deletes the namespace's NetworkPolicies and returns the
// function that puts the very same ones back.
func removePolicies(ctx context.Context, t *testing.T, cs kubernetes.Interface) func() {
	t.Helper()
	l, err := cs.NetworkingV1().NetworkPolicies(kindenv.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) == 0 {
		t.Fatal("the deployment has no NetworkPolicies to remove")
	}
	saved := l.Items
	for _, p := range saved {
		if err := cs.NetworkingV1().NetworkPolicies(kindenv.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete policy %s: %v", p.Name, err)
		}
	}
	t.Logf("deleted %d NetworkPolicies", len(saved))
	return func() {
		ctx := context.WithoutCancel(ctx)
		for _, p := range saved {
			p.ResourceVersion, p.UID, p.CreationTimestamp, p.ManagedFields = "", "", metav1.Time{}, nil
			if _, err := cs.NetworkingV1().NetworkPolicies(kindenv.Namespace).Create(ctx, &p, metav1.CreateOptions{}); err != nil {
				t.Errorf("restore policy %s: %v", p.Name, err)
			}
		}
	}
}

// deleteSnippetPods deletes every snippet pod, so that what the pools have
// afterwards was made after the change under test, and returns the names of
// those it found: every other snippet pod was made after the change. (Not a
// time: creation timestamps are whole seconds, and the pools replace what is
// deleted within the same second.)
func deleteSnippetPods(ctx context.Context, t *testing.T, cs kubernetes.Interface) map[string]bool {
	t.Helper()
	pods := cs.CoreV1().Pods(kindenv.Namespace)
	sel := metav1.ListOptions{LabelSelector: kube.RunnerSelector().String()}
	l, err := pods.List(ctx, sel)
	if err != nil {
		t.Fatalf("list snippet pods: %v", err)
	}
	before := map[string]bool{}
	for _, p := range l.Items {
		before[p.Name] = true
	}
	zero := int64(0)
	// Pods made between the list and the deletion are deleted too; they
	// were made after the change, so they count as new while they last.
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, sel); err != nil {
		t.Fatalf("delete snippet pods: %v", err)
	}
	return before
}

// neverReady fails the test if any snippet pod not among before is Ready at
// any point during window.
func neverReady(ctx context.Context, t *testing.T, cs kubernetes.Interface, before map[string]bool, window time.Duration) {
	t.Helper()
	end := time.Now().Add(window)
	seen := map[string]bool{}
	for time.Now().Before(end) && ctx.Err() == nil {
		pods, err := cs.CoreV1().Pods(kindenv.Namespace).List(ctx, metav1.ListOptions{LabelSelector: kube.RunnerSelector().String()})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if before[p.Name] {
				continue
			}
			seen[p.Name] = true
			if kube.IsReady(&p) {
				t.Fatalf("snippet pod %s, made after the network was opened, is Ready: it would run snippets on an open network", p.Name)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(seen) == 0 {
		t.Fatalf("no snippet pod was made in %s: nothing shows pods stay unready", window)
	}
	t.Logf("%d snippet pods made after the cut, none Ready in %s", len(seen), window)
}

// assertFailsClosed checks what serve does while its pods cannot prove
// their seal: the 503 that says so (never a result), serve still Ready in
// its Service, the metric and a log line.
func assertFailsClosed(ctx context.Context, t *testing.T, cfg *envconf.Config, cs kubernetes.Interface) {
	t.Helper()
	base, serve := forwardToServe(ctx, t, cfg, podReady)
	var last reply
	deadline := time.Now().Add(unsealedNoticeDeadline)
	for {
		r, err := post(ctx, base, "print('ran on an open network')", 5)
		if err != nil {
			t.Fatal(err)
		}
		last = r
		if r.err == nil {
			t.Fatalf("a snippet ran while no pod could prove its network sealed: %s", r)
		}
		if r.status() == http.StatusServiceUnavailable && strings.Contains(r.errorMsg(), unsealedNotice) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q within %s; last answer %s", unsealedNotice, unsealedNoticeDeadline, r)
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("serve %s answers: %s", serve, last)
	if last.err.RetryAfter == 0 {
		t.Error("the 503 carries no Retry-After")
	}
	body, err := get(ctx, base+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if !metricAbove(body, "sandbox_pool_unsealed_pods", 0) {
		t.Errorf("/metrics does not count unsealed pods:\n%s", grepLines(body, "sandbox_pool_"))
	}
	logs, err := cs.CoreV1().Pods(kindenv.Namespace).GetLogs(serve, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logs), unsealedNotice) {
		t.Errorf("serve %s logged nothing saying %q", serve, unsealedNotice)
	}
	d, err := cs.AppsV1().Deployments(kindenv.Namespace).Get(ctx, kindenv.Deployment, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Status.ReadyReplicas == 0 || d.Status.ReadyReplicas != d.Status.Replicas {
		t.Errorf("serve left its Service: %d of %d replicas Ready", d.Status.ReadyReplicas, d.Status.Replicas)
	}
}

func metricAbove(body, name string, v float64) bool {
	for _, l := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(l, name+" "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil && f > v {
				return true
			}
		}
	}
	return false
}

func grepLines(body, prefix string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// waitPoolsWarm waits until every serve pod's pool has a Ready pod again:
// later tests in the same run start from a working deployment.
func waitPoolsWarm(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ctx = context.WithoutCancel(ctx)
	err := wait.PollUntilContextTimeout(ctx, time.Second, resealDeadline, true, func(ctx context.Context) (bool, error) {
		serves, err := cs.CoreV1().Pods(kindenv.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=sandbox"})
		if err != nil {
			return false, nil //nolint:nilerr // retry until the deadline
		}
		for _, s := range serves.Items {
			if s.DeletionTimestamp != nil {
				continue
			}
			pods, err := poolPods(ctx, cs, s.Name)
			if err != nil {
				return false, nil //nolint:nilerr // retry until the deadline
			}
			if warm, _ := supply(pods); warm == 0 {
				return false, nil
			}
		}
		return len(serves.Items) > 0, nil
	})
	if err != nil {
		t.Errorf("the pools did not get a Ready pod again within %s: %v", resealDeadline, err)
	}
}

type (
	unsealKey struct{}
	cutKey    struct{}
)

// TestUnsealedNetworkNeverReady deletes the NetworkPolicies: no snippet pod
// made afterwards becomes Ready (none can prove its egress cut), serve
// answers 503 "the network is not sealed" and stays in its Service; then
// the policies come back and the pools are warm again.
func TestUnsealedNetworkNeverReady(t *testing.T) {
	testenv.Test(t, failsClosedFeature("without NetworkPolicies no snippet pod is Ready, and serve says why", removePolicies))
}

// failsClosedFeature takes the network's seal away with unseal (which
// returns the function that puts it back), replaces the warm pods with pods
// made without it, and asserts that none becomes Ready and that serve
// answers the 503, stays Ready, counts and logs it; then it restores the
// seal and waits for warm pools, so that later tests start from a working
// deployment.
func failsClosedFeature(name string, unseal func(context.Context, *testing.T, kubernetes.Interface) func()) features.Feature {
	return features.New(name).
		WithLabel("needs", "service").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			if err := ServiceErr(ctx); err != nil {
				t.Fatal(err)
			}
			cs := clientset(ctx, t)
			ctx = context.WithValue(ctx, unsealKey{}, unseal(ctx, t, cs))
			// Pods proven before the seal went may keep rules that
			// outlive it: replace them with pods made without it.
			return context.WithValue(ctx, cutKey{}, deleteSnippetPods(ctx, t, cs))
		}).
		Assess("no new pod is Ready", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			neverReady(ctx, t, clientset(ctx, t), ctx.Value(cutKey{}).(map[string]bool), neverReadyWindow)
			return ctx
		}).
		Assess("serve answers the 503, stays Ready, counts and logs it", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			assertFailsClosed(ctx, t, cfg, clientset(ctx, t))
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			if restore, ok := ctx.Value(unsealKey{}).(func()); ok {
				restore()
			}
			waitPoolsWarm(ctx, t, clientset(ctx, t))
			return ctx
		}).
		Feature()
}

// stopKubeRouter takes the NetworkPolicy engine off the node (a nodeSelector
// no node matches) and returns the function that brings it back and waits
// for it.
func stopKubeRouter(ctx context.Context, t *testing.T, cs kubernetes.Interface) func() {
	t.Helper()
	dss := cs.AppsV1().DaemonSets("kube-system")
	ds, err := dss.Get(ctx, "kube-router", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the kube-router DaemonSet: %v", err)
	}
	orig := ds.Spec.Template.Spec.NodeSelector
	set := func(sel map[string]string) error {
		return retryConflict(ctx, func() error {
			d, err := dss.Get(ctx, "kube-router", metav1.GetOptions{})
			if err != nil {
				return err
			}
			d.Spec.Template.Spec.NodeSelector = sel
			_, err = dss.Update(ctx, d, metav1.UpdateOptions{})
			return err
		})
	}
	if err := set(map[string]string{"sandbox.dev/e2e-kube-router-stopped": "true"}); err != nil {
		t.Fatalf("stop kube-router: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-router"})
		return err == nil && len(l.Items) == 0, nil
	})
	restore := func() {
		ctx := context.WithoutCancel(ctx)
		if err := set(orig); err != nil {
			t.Errorf("restore kube-router: %v", err)
			return
		}
		err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			d, err := dss.Get(ctx, "kube-router", metav1.GetOptions{})
			return err == nil && d.Status.ObservedGeneration >= d.Generation && d.Status.DesiredNumberScheduled > 0 &&
				d.Status.NumberReady == d.Status.DesiredNumberScheduled && d.Status.UpdatedNumberScheduled == d.Status.DesiredNumberScheduled, nil
		})
		if err != nil {
			t.Errorf("kube-router not back: %v", err)
		}
	}
	if err != nil {
		restore()
		t.Fatalf("kube-router pods still there: %v", err)
	}
	t.Log("kube-router stopped")
	return restore
}

func retryConflict(ctx context.Context, f func() error) error {
	var err error
	for range 5 {
		if err = f(); err == nil || !strings.Contains(err.Error(), "the object has been modified") {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}

// TestKubeRouterStopped: with the NetworkPolicy engine stopped, the
// policies exist but nothing enforces them for new pods: none becomes
// Ready, serve answers the 503 and stays Ready; then kube-router comes back
// and the pools are warm again.
func TestKubeRouterStopped(t *testing.T) {
	testenv.Test(t, failsClosedFeature("with kube-router stopped no new snippet pod is Ready, and serve says why", stopKubeRouter))
}

// readyOnProofRounds is how many pods TestReadyOnProofTiming times.
const readyOnProofRounds = 6

// replacedTimerDelay is the timer readiness was before the runner's proof:
// Ready 2 s after the container started.
const replacedTimerDelay = 2 * time.Second

// TestReadyOnProofTiming measures snippet pods' readiness now that it is
// the runner's proof: one warm pod of a serve pod deleted at a time, its
// replacement timed from the watch's ADDED, and from its container first
// seen running, to its Ready. The proof is judged on the second span, its
// own: create-to-Ready is mostly the node starting a pod (2.5 to 4 s on an
// idle cluster with the timer, 8 s on a loaded CI node), which the proof
// neither adds to nor saves.
func TestReadyOnProofTiming(t *testing.T) {
	f := features.New("create-to-Ready on proof").
		WithLabel("needs", "service").
		Setup(withFullPool).
		Assess("timed", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			pe := poolOf(ctx)
			var took, proved []time.Duration
			var proof string
			for i := range readyOnProofRounds {
				r := timeReplacement(ctx, t, pe)
				took = append(took, r.created)
				proved = append(proved, r.running)
				t.Logf("round %d: %s Ready %s after it was created, %s after its container was seen running",
					i+1, r.name, r.created.Round(time.Millisecond), r.running.Round(time.Millisecond))
				if proof == "" {
					proof = sealLine(ctx, pe.cs, r.name)
				}
				waitWarm(ctx, t, pe.cs, pe.owner, pe.target, refillDeadline)
			}
			p50, p50proof := median(took), median(proved)
			t.Logf("over %d pods, create-to-Ready p50 %s, running-to-Ready p50 %s (the timer it replaced: %s); the runner's proof: %s",
				len(took), p50.Round(time.Millisecond), p50proof.Round(time.Millisecond), replacedTimerDelay, proof)
			if p50proof >= replacedTimerDelay {
				t.Errorf("median running-to-Ready %s: the proof is slower than the %s timer it replaced", p50proof, replacedTimerDelay)
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, f)
}

// replacement is how long a replaced warm pod took to be Ready.
type replacement struct {
	name string
	// created is from the watch's ADDED; running from the first event that
	// shows its container running (zero when that event already says Ready).
	created, running time.Duration
}

// timeReplacement deletes one warm pod of pe's pool and times its
// replacement to Ready.
func timeReplacement(ctx context.Context, t *testing.T, pe poolEnv) replacement {
	t.Helper()
	pods, err := poolPods(ctx, pe.cs, pe.owner)
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	victim := ""
	for _, p := range pods {
		known[p.Name] = true
		if victim == "" && kube.IsReady(&p) && !kube.IsClaimed(&p) {
			victim = p.Name
		}
	}
	if victim == "" {
		t.Fatal("no warm pod to replace")
	}
	w, err := pe.cs.CoreV1().Pods(kindenv.Namespace).Watch(ctx, metav1.ListOptions{LabelSelector: kube.OwnerSelector(pe.owner).String()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	zero := int64(0)
	if err := pe.cs.CoreV1().Pods(kindenv.Namespace).Delete(ctx, victim, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	added, running := map[string]time.Time{}, map[string]time.Time{}
	timeout := time.After(refillDeadline)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended")
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || known[p.Name] || ev.Type == watch.Deleted {
				continue
			}
			now := time.Now()
			if _, ok := added[p.Name]; !ok {
				added[p.Name] = now
			}
			if _, ok := running[p.Name]; !ok && containerRunning(p) {
				running[p.Name] = now
			}
			if kube.IsReady(p) {
				return replacement{name: p.Name, created: now.Sub(added[p.Name]), running: now.Sub(running[p.Name])}
			}
		case <-timeout:
			t.Fatalf("no replacement of %s Ready within %s", victim, refillDeadline)
		}
	}
}

// containerRunning says whether p's first container is running.
func containerRunning(p *corev1.Pod) bool {
	cs := p.Status.ContainerStatuses
	return len(cs) > 0 && cs[0].State.Running != nil
}

// sealLine is the runner's log line about its proof, for the test log.
func sealLine(ctx context.Context, cs kubernetes.Interface, pod string) string {
	b, err := cs.CoreV1().Pods(kindenv.Namespace).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return "(logs: " + err.Error() + ")"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "network sealed") {
			return l
		}
	}
	return "(no proof line in the runner's log)"
}
