//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/sandboxd/sandbox/e2e/kindenv"
	"github.com/sandboxd/sandbox/internal/kube"
)

// Each serve replica claims its pods in memory, so each must only ever hand
// out pods it made itself: these tests watch who made every sandbox pod and
// check who ran a job on it.

// ownershipJobs is how many executions each replica gets at once: more than
// its floor, so that it also hands out pods it creates during the test.
const ownershipJobs = 6

// podMaker is what a watch saw of every snippet pod: its owner and
// incarnation labels and its ownerReferences, kept after the pod is gone.
type podMaker struct {
	mu   sync.Mutex
	pods map[string]*corev1.Pod
	stop func()
}

// watchMakers lists and then watches every snippet pod until the test ends.
func watchMakers(ctx context.Context, t *testing.T, cs kubernetes.Interface) *podMaker {
	t.Helper()
	pm := &podMaker{pods: map[string]*corev1.Pod{}}
	sel := metav1.ListOptions{LabelSelector: kube.RunnerSelector().String()}
	l, err := cs.CoreV1().Pods(kindenv.Namespace).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for i := range l.Items {
		pm.pods[l.Items[i].Name] = &l.Items[i]
	}
	sel.ResourceVersion = l.ResourceVersion
	w, err := cs.CoreV1().Pods(kindenv.Namespace).Watch(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type != watch.Error {
				pm.mu.Lock()
				if _, seen := pm.pods[p.Name]; !seen {
					pm.pods[p.Name] = p
				}
				pm.mu.Unlock()
			}
		}
	})
	pm.stop = func() { w.Stop(); wg.Wait() }
	t.Cleanup(pm.stop)
	return pm
}

// get waits up to 10 s for the watch to have seen name.
func (pm *podMaker) get(ctx context.Context, name string) (*corev1.Pod, error) {
	var p *corev1.Pod
	err := wait.For(func(context.Context) (bool, error) {
		pm.mu.Lock()
		defer pm.mu.Unlock()
		p = pm.pods[name]
		return p != nil, nil
	}, wait.WithContext(ctx), wait.WithTimeout(10*time.Second), wait.WithInterval(50*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("the watch never saw sandbox pod %s: %w", name, err)
	}
	return p, nil
}

// madeBy says whether p was made by the serve pod srv: its owner label and
// its one ownerReference name srv (by UID).
func madeBy(p *corev1.Pod, srv *corev1.Pod) bool {
	refs := p.OwnerReferences
	return p.Labels[kube.LabelOwner] == kube.LabelValue(srv.Name) &&
		len(refs) == 1 && refs[0].Kind == "Pod" && refs[0].UID == srv.UID
}

// TestPoolReplicasNeverSharePods: both replicas take executions at once,
// through their own port-forwards; every pod that ran a job ran exactly
// one, and was made by the replica that answered.
func TestPoolReplicasNeverSharePods(t *testing.T) {
	f := features.New("two serve replicas never hand out each other's pods").
		WithLabel("needs", "service").
		Assess("each job ran on a pod of the replica that answered, each pod once", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if err := ServiceErr(ctx); err != nil {
				t.Fatal(err)
			}
			cs := clientset(ctx, t)
			makers := watchMakers(ctx, t, cs)
			baseA, a := forwardToServe(ctx, t, cfg, podReady)
			baseB, b := forwardToServe(ctx, t, cfg, func(p corev1.Pod) bool { return p.Name != a && podReady(p) })
			size := poolTarget(ctx, t, baseA)
			waitWarm(ctx, t, cs, a, size, refillDeadline)
			waitWarm(ctx, t, cs, b, size, refillDeadline)
			servers := map[string]*corev1.Pod{}
			for _, name := range []string{a, b} {
				p, err := cs.CoreV1().Pods(kindenv.Namespace).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				servers[name] = p
			}

			type ran struct{ serve, pod, err string }
			out := make(chan ran, 2*ownershipJobs)
			var wg sync.WaitGroup
			for serve, base := range map[string]string{a: baseA, b: baseB} {
				for i := range ownershipJobs {
					wg.Go(func() {
						// A 503 ran nothing: asked again, as a client
						// does, since this test is about whose pods run
						// the jobs, not how fast a busy node refills them.
						var r reply
						var err error
						for attempt := 1; ; attempt++ {
							r, err = post(ctx, base, fmt.Sprintf("print(%d)", i), 20)
							if err != nil || r.status() != http.StatusServiceUnavailable || attempt == 3 {
								break
							}
						}
						switch {
						case err != nil:
							out <- ran{serve: serve, err: err.Error()}
						case r.err != nil || r.res.ExitCode != 0 || r.res.Stdout != strconv.Itoa(i)+"\n":
							out <- ran{serve: serve, err: r.String()}
						default:
							out <- ran{serve: serve, pod: r.res.SandboxID}
						}
					})
				}
			}
			wg.Wait()
			close(out)
			seen := map[string]string{}
			for r := range out {
				if r.err != "" {
					t.Errorf("through %s: %s", r.serve, r.err)
					continue
				}
				if prev, dup := seen[r.pod]; dup {
					t.Errorf("sandbox pod %s ran a job for %s and one for %s", r.pod, prev, r.serve)
				}
				seen[r.pod] = r.serve
				p, err := makers.get(ctx, r.pod)
				if err != nil {
					t.Error(err)
					continue
				}
				if !madeBy(p, servers[r.serve]) {
					t.Errorf("%s ran a job on %s, whose owner label is %q and ownerReferences %+v",
						r.serve, r.pod, p.Labels[kube.LabelOwner], p.OwnerReferences)
				}
				if p.Labels[kube.LabelIncarnation] == "" {
					t.Errorf("sandbox pod %s has no incarnation label", r.pod)
				}
			}
			t.Logf("%d jobs through %s and %s, on %d distinct pods, each made by the replica that ran it", 2*ownershipJobs, a, b, len(seen))
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// restartDeadline: a killed serve container is running and Ready again.
const restartDeadline = 2 * time.Minute

// TestPoolServeContainerRestart: serve's process is killed outright (no
// shutdown, so it deletes nothing), and its container restarts in the same
// pod: same name, same UID, so the garbage collector has nothing to do. The
// new process must never hand out a pod of the earlier one -- their claims
// died with its memory -- and its janitor deletes them all.
func TestPoolServeContainerRestart(t *testing.T) {
	f := features.New("a restarted serve container never reuses its earlier start's pods").
		WithLabel("needs", "service").
		Setup(withFullPool).
		Assess("jobs run on new pods only; the earlier pods are deleted", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			pe := poolOf(ctx)
			pods := pe.cs.CoreV1().Pods(kindenv.Namespace)
			srv, err := pods.Get(ctx, pe.owner, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			restarts := serveRestarts(srv)
			makers := watchMakers(ctx, t, pe.cs)

			// Kill the serve process from the node: SIGKILL, no shutdown.
			node := srv.Spec.NodeName
			sandboxes := strings.Fields(crictl(ctx, t, node, "pods", "--name", "^"+pe.owner+"$", "--namespace", kindenv.Namespace, "-q"))
			if len(sandboxes) != 1 {
				t.Fatalf("pod sandboxes of %s: %q", pe.owner, sandboxes)
			}
			ctrs := strings.Fields(crictl(ctx, t, node, "ps", "--pod", sandboxes[0], "--name", "^serve$", "-q"))
			if len(ctrs) != 1 {
				t.Fatalf("serve containers of %s: %q", pe.owner, ctrs)
			}
			pid := gjson.Get(crictl(ctx, t, node, "inspect", ctrs[0]), "info.pid").Int()
			if pid <= 0 {
				t.Fatalf("no process of serve container %s", ctrs[0])
			}
			earlier, err := poolPods(ctx, pe.cs, pe.owner)
			if err != nil {
				t.Fatal(err)
			}
			onNode(ctx, t, node, "kill", "-KILL", strconv.FormatInt(pid, 10))
			killed := time.Now()
			old := map[string]bool{}
			oldInc := map[string]bool{}
			for _, p := range earlier {
				old[p.Name] = true
				oldInc[p.Labels[kube.LabelIncarnation]] = true
			}
			t.Logf("killed serve %s (pid %d on the node); its earlier pods: %d, incarnations %v", pe.owner, pid, len(old), oldInc)

			// The same pod, restarted and Ready.
			again := func(p corev1.Pod) bool {
				return p.Name == pe.owner && p.UID == srv.UID && serveRestarts(&p) > restarts && podReady(p)
			}
			err = wait.For(func(ctx context.Context) (bool, error) {
				p, err := pods.Get(ctx, pe.owner, metav1.GetOptions{})
				return err == nil && again(*p), err
			}, wait.WithContext(ctx), wait.WithTimeout(restartDeadline), wait.WithInterval(500*time.Millisecond))
			if err != nil {
				t.Fatalf("serve %s not restarted and Ready within %s: %v", pe.owner, restartDeadline, err)
			}
			base, _ := forwardToServe(ctx, t, cfg, again)
			t.Logf("serve %s Ready again %s after the kill", pe.owner, time.Since(killed).Round(time.Millisecond))

			for i := range ownershipJobs {
				r, err := post(ctx, base, fmt.Sprintf("print(%d)", i), 20)
				if err != nil {
					t.Fatal(err)
				}
				if r.err != nil || r.res.ExitCode != 0 {
					t.Errorf("job %d after the restart: %s", i, r)
					continue
				}
				if old[r.res.SandboxID] {
					t.Errorf("job %d ran on %s, a pod of the killed process", i, r.res.SandboxID)
					continue
				}
				p, err := makers.get(ctx, r.res.SandboxID)
				if err != nil {
					t.Error(err)
					continue
				}
				if oldInc[p.Labels[kube.LabelIncarnation]] {
					t.Errorf("job %d ran on %s of the earlier incarnation %q", i, p.Name, p.Labels[kube.LabelIncarnation])
				}
			}

			var left []string
			err = wait.For(func(ctx context.Context) (bool, error) {
				now, err := poolPods(ctx, pe.cs, pe.owner)
				if err != nil {
					return false, err
				}
				left = left[:0]
				for _, p := range now {
					if old[p.Name] && p.DeletionTimestamp == nil {
						left = append(left, p.Name)
					}
				}
				return len(left) == 0, nil
			}, wait.WithContext(ctx), wait.WithTimeout(time.Minute), wait.WithInterval(500*time.Millisecond))
			if err != nil {
				t.Errorf("pods of the killed process still there: %v: %v", left, err)
			}
			waitWarm(ctx, t, pe.cs, pe.owner, pe.target, refillDeadline)
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// serveRestarts is the serve container's restart count.
func serveRestarts(p *corev1.Pod) int32 {
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == "serve" {
			return c.RestartCount
		}
	}
	return 0
}
