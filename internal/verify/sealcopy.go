package verify

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/verify/netsec"
)

// network/ready-on-proof: a snippet pod's runner is Ready only once it has
// proven its egress cut. verify shows it on the live deployment without
// touching it: a copy of a live snippet pod, started in verify's own
// namespace, where no NetworkPolicy applies, must never become Ready, while
// the live pods (the control) are.
const (
	checkReadyOnProof    = "network/ready-on-proof"
	propertyReadyOnProof = "28"
	sealCopyName         = "seal-copy"
	roleSealCopy         = "seal-copy"
)

// sealCopyWindow is how long the copy is watched: a live pod proves its
// seal and is Ready within a few seconds, and a runner that skips the proof
// is Ready within one probe period of its start. Tests shorten it.
var sealCopyWindow = 12 * time.Second

// sealCopy is the copy verify started, or why it could not.
type sealCopy struct {
	from    string // the live pod copied
	started time.Time
	err     error
}

// startSealCopy copies a live, Ready snippet pod into ns (spec as it is,
// the runner's flags included; verify's labels, no owner) and creates it.
func (e *env) startSealCopy(ctx context.Context, ns string) *sealCopy {
	live := e.readySnippetPods(ctx, 1)
	if len(live) == 0 {
		return &sealCopy{err: fmt.Errorf("no Ready snippet pod to copy within %s", warmPodWait)}
	}
	src := live[0]
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: sealCopyName, Namespace: ns,
			Labels: map[string]string{netsec.LabelApp: netsec.AppName, netsec.LabelRole: roleSealCopy}},
		Spec: *src.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = ""
	pod.Spec.ServiceAccountName, pod.Spec.DeprecatedServiceAccount = "", ""
	if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return &sealCopy{from: src.Name, err: fmt.Errorf("create the copy of %s: %w", src.Name, err)}
	}
	return &sealCopy{from: src.Name, started: time.Now()}
}

// judgeSealCopy watches the copy until sealCopyWindow after its creation:
// Ready at any point is a FAIL; never Ready, with its runner saying the
// network is not sealed, a PASS. open says whether the control, in the same
// namespace, reached the API server (what the copy's runner tries): if it
// did not, that namespace is not open either, and the copy proves nothing.
func (e *env) judgeSealCopy(ctx context.Context, fx *fixtures, sc *sealCopy, open bool, openWhat string) Result {
	if sc.err != nil {
		return result(checkReadyOnProof, propertyReadyOnProof, Inconclusive, "%v", sc.err)
	}
	if !open {
		return result(checkReadyOnProof, propertyReadyOnProof, Inconclusive,
			"the control did not reach the API server from namespace %s (%s), so the copy of %s was not on an open network", fx.Namespace, openWhat, sc.from)
	}
	var last *corev1.Pod
	running := false
	for {
		p, err := e.cs.CoreV1().Pods(fx.Namespace).Get(ctx, sealCopyName, metav1.GetOptions{})
		if err == nil {
			last = p
			running = running || p.Status.Phase == corev1.PodRunning
			if kube.IsReady(p) {
				return result(checkReadyOnProof, propertyReadyOnProof, Fail,
					"a copy of live pod %s became Ready %s after its creation in namespace %s, where no NetworkPolicy cuts its egress: its runner reports Ready without proving the seal",
					sc.from, time.Since(sc.started).Round(100*time.Millisecond), fx.Namespace)
			}
		}
		if time.Since(sc.started) > sealCopyWindow || ctx.Err() != nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !running {
		return result(checkReadyOnProof, propertyReadyOnProof, Inconclusive, "the copy of %s never ran within %s: %s", sc.from, sealCopyWindow, podState(last))
	}
	why := e.askSeal(ctx, fx, last)
	ev := fmt.Sprintf("a copy of live pod %s (Ready in namespace %s) ran %s in namespace %s, where the control reached the API server (%s), and was never Ready; its runner: %s",
		sc.from, e.opts.Namespace, sealCopyWindow, fx.Namespace, openWhat, why)
	if !strings.Contains(why, `"sealed":false`) {
		return result(checkReadyOnProof, propertyReadyOnProof, Inconclusive, "not Ready, but its runner did not say the network is open: %s", ev)
	}
	return result(checkReadyOnProof, propertyReadyOnProof, Pass, "%s", ev)
}

// askSeal reads the copy's GET /seal from the control pod (same namespace,
// no policy between them).
func (e *env) askSeal(ctx context.Context, fx *fixtures, p *corev1.Pod) string {
	if p == nil || p.Status.PodIP == "" {
		return "no IP to ask"
	}
	script := fmt.Sprintf("import urllib.request\nprint(urllib.request.urlopen('http://%s:%d/seal', timeout=5).read().decode())\n",
		p.Status.PodIP, runnerPort(p))
	res, err := podExec(ctx, e.cfg, e.cs, fx.Namespace, fx.ControlPod, fx.ControlName, []string{"python3", "-c", script}, "")
	if err != nil {
		return fmt.Sprintf("could not be asked (%v)", err)
	}
	return clip(strings.TrimSpace(res.Stdout), 400)
}
