//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/sandboxd/sandbox/e2e/kindenv"
	"github.com/sandboxd/sandbox/internal/kube"
)

// Pods that die or fall silent while their runner holds a job.

// sleepCode runs longer than any deadline of TestPoolPodDiesMidRun.
const sleepCode = "import time; time.sleep(30)"

func TestPoolPodDiesMidRun(t *testing.T) {
	f := features.New("a pod deleted during a run gives a 5xx naming the reason").
		WithLabel("needs", "service").
		Setup(withFullPool).
		Assess("502 naming the deletion, long before the snippet would end", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			pe := poolOf(ctx)
			earlier := claimedPods(ctx, t, pe)
			run := postAsync(ctx, pe.base, sleepCode, 40)
			// Whatever happens below, the request ends before the test does.
			defer run.stop()
			victim := podRunningJob(ctx, t, pe, earlier)
			zero := int64(0)
			if err := pe.cs.CoreV1().Pods(kindenv.Namespace).Delete(ctx, victim.Name, metav1.DeleteOptions{
				GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &victim.UID}}); err != nil {
				t.Fatalf("delete claimed pod %s: %v", victim.Name, err)
			}
			deleted := time.Now()

			r, err := run.wait(verdictDeadline)
			if err != nil {
				t.Fatalf("after deleting %s mid-run: %v", victim.Name, err)
			}
			after := time.Since(deleted)
			t.Logf("deleted %s mid-run; answer %s after the delete: %s", victim.Name, after.Round(time.Millisecond), r)
			if r.status() < 500 {
				t.Errorf("status %d, want a 5xx: %s", r.status(), r)
			}
			if msg := r.errorMsg(); !strings.Contains(msg, victim.Name) || !strings.Contains(msg, "deleted") {
				t.Errorf("error %q does not name the pod %s and its deletion", msg, victim.Name)
			}
			if r.took >= 30*time.Second {
				t.Errorf("answered after %s: the run was not cut short", r.took)
			}

			// The pool makes up for the lost pod.
			took := waitWarm(ctx, t, pe.cs, pe.owner, pe.target, refillDeadline)
			t.Logf("pool full again %s later", took.Round(time.Millisecond))
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// claimedPods names the pool's pods claimed before a test's run: earlier
// tests' pods on their way out, which are not the run's.
func claimedPods(ctx context.Context, t *testing.T, pe poolEnv) map[string]bool {
	t.Helper()
	pods, err := poolPods(ctx, pe.cs, pe.owner)
	if err != nil {
		t.Fatal(err)
	}
	claimed := map[string]bool{}
	for _, p := range pods {
		if kube.IsClaimed(&p) {
			claimed[p.Name] = true
		}
	}
	return claimed
}

// podRunningJob waits for the claimed pod whose runner took the job: its
// readiness turns false once the job is taken, so what a test does to it
// now happens mid-run (a pod lost before the job reached it is silently
// replaced).
func podRunningJob(ctx context.Context, t *testing.T, pe poolEnv, earlier map[string]bool) *corev1.Pod {
	t.Helper()
	var victim *corev1.Pod
	err := wait.For(func(ctx context.Context) (bool, error) {
		pods, err := poolPods(ctx, pe.cs, pe.owner)
		if err != nil {
			return false, err
		}
		for i := range pods {
			p := &pods[i]
			if kube.IsClaimed(p) && !earlier[p.Name] && p.DeletionTimestamp == nil &&
				p.Status.Phase == corev1.PodRunning && !podReady(*p) {
				victim = p
				return true, nil
			}
		}
		return false, nil
	}, wait.WithContext(ctx), wait.WithTimeout(20*time.Second), wait.WithInterval(100*time.Millisecond))
	if err != nil {
		t.Fatalf("no claimed pod running the job: %v", err)
	}
	return victim
}

// asyncPost is one execution running in the background.
type asyncPost struct {
	done   chan struct{}
	r      reply
	err    error
	cancel context.CancelFunc
}

// postAsync starts post in the background; stop must be called.
func postAsync(ctx context.Context, base, code string, timeoutS int) *asyncPost {
	ctx, cancel := context.WithCancel(ctx)
	a := &asyncPost{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(a.done)
		a.r, a.err = post(ctx, base, code, timeoutS)
	}()
	return a
}

// wait returns the answer, or an error when none came within d.
func (a *asyncPost) wait(d time.Duration) (reply, error) {
	select {
	case <-a.done:
		return a.r, a.err
	case <-time.After(d):
		return reply{}, fmt.Errorf("no answer within %s", d)
	}
}

// stop cancels the request if it is still running and waits for it.
func (a *asyncPost) stop() {
	a.cancel()
	<-a.done
}

// silentCode runs longer than TestPoolPodGoesSilentMidRun waits: without
// keepalive probes the pool would wait for its 60 s timeout and 15 s more.
const silentCode = "import time; time.sleep(58)"

// silentDeadline: the pool notices a runner whose network went dark (about
// 11 s of keepalive probes) and gives up on its status (10 s more).
const silentDeadline = 35 * time.Second

func TestPoolPodGoesSilentMidRun(t *testing.T) {
	f := features.New("a pod whose network goes dark during a run gives a 502 without waiting for the timeout").
		WithLabel("needs", "service").
		Setup(withFullPool).
		Assess("502 naming the pod, well before the 60 s timeout", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			pe := poolOf(ctx)
			earlier := claimedPods(ctx, t, pe)
			run := postAsync(ctx, pe.base, silentCode, 60)
			defer run.stop()
			victim := podRunningJob(ctx, t, pe, earlier)
			// As a lost node would: the pod stays Running in the API and
			// its connection stays open, but nothing answers any more.
			cutPodNetwork(ctx, t, victim.Spec.NodeName, victim.Name)
			cut := time.Now()

			r, err := run.wait(silentDeadline)
			if err != nil {
				t.Fatalf("after cutting %s's network mid-run: %v", victim.Name, err)
			}
			t.Logf("cut %s's network mid-run; answer %s after the cut: %s", victim.Name, time.Since(cut).Round(time.Millisecond), r)
			if r.status() != 502 {
				t.Errorf("status %d, want 502: %s", r.status(), r)
			}
			if msg := r.errorMsg(); !strings.Contains(msg, victim.Name) || !strings.Contains(msg, "lost the runner") {
				t.Errorf("error %q does not name the pod %s and the lost runner", msg, victim.Name)
			}
			took := waitWarm(ctx, t, pe.cs, pe.owner, pe.target, refillDeadline)
			t.Logf("pool full again %s later", took.Round(time.Millisecond))
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// cutPodNetwork takes the pod's interface down inside its network
// namespace on the kind node, found through the pod sandbox's process.
func cutPodNetwork(ctx context.Context, t *testing.T, node, pod string) {
	t.Helper()
	ids := strings.Fields(crictl(ctx, t, node, "pods", "--name", "^"+pod+"$", "--namespace", kindenv.Namespace, "-q"))
	if len(ids) != 1 {
		t.Fatalf("pod sandboxes of %s on %s: %q", pod, node, ids)
	}
	pid := gjson.Get(crictl(ctx, t, node, "inspectp", ids[0]), "info.pid").Int()
	if pid <= 0 {
		t.Fatalf("no process of pod sandbox %s of %s", ids[0], pod)
	}
	onNode(ctx, t, node, "nsenter", "-t", strconv.FormatInt(pid, 10), "-n", "ip", "link", "set", "eth0", "down")
}

// onNode runs a command in the kind node's container and returns its
// output, failing the test if it fails.
func onNode(ctx context.Context, t *testing.T, node string, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(ctx, "docker", append([]string{"exec", node}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("on node %s: %v: %v\n%s", node, args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// crictl runs crictl on a node with a timeout fit for a loaded CI node: its
// default of 2 s to reach containerd is too short right after the runtime
// restart of TestContainerRuntimeRestart, or while pods churn.
func crictl(ctx context.Context, t *testing.T, node string, args ...string) string {
	t.Helper()
	return onNode(ctx, t, node, append([]string{"crictl", "--timeout=30s"}, args...)...)
}
