package verify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/manifests"
	"github.com/sandboxd/sandbox/internal/verify/netsec"
)

// fixtures are verify's own pods: the canary (HTTP with a token, DNS on 53,
// and a ClusterIP Service in front) and the unrestricted control.
type fixtures struct {
	Namespace   string
	Token       string
	CanaryIP    string
	ServiceIP   string
	ControlPod  string
	ControlName string // container name
}

// randomHex returns n random bytes as hex, for names and tokens.
func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // never fails on Linux
	}
	return hex.EncodeToString(b)
}

// fixtureReadyTimeout covers pod start on a loaded node; on kind a pod is
// Ready in about 2 s.
const fixtureReadyTimeout = 90 * time.Second

// deployFixtures creates a namespace of verify's own and its pods, and waits
// until they are Ready. The caller deletes the namespace (cleanupFixtures)
// whatever happens, also when this returns an error.
func deployFixtures(ctx context.Context, cs kubernetes.Interface, ns, image string) (*fixtures, error) {
	fx := &fixtures{Namespace: ns, Token: randomHex(12), ControlPod: "control", ControlName: netsec.RoleControl}
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: ns,
		// A client namespace: its control must reach serve (the positive
		// control of serve's pods being out of a snippet's reach).
		Labels: map[string]string{netsec.LabelApp: netsec.AppName, manifests.ClientLabel: "true"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create namespace %s: %w", ns, err)
	}
	pods := []*corev1.Pod{netsec.CanaryPod(ns, image, fx.Token), netsec.ControlPod(ns, image)}
	for _, p := range pods {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create pod %s/%s: %w", ns, p.Name, err)
		}
	}
	svc, err := cs.CoreV1().Services(ns).Create(ctx, netsec.CanaryService(ns), metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create service %s/canary: %w", ns, err)
	}
	fx.ServiceIP = svc.Spec.ClusterIP
	for _, want := range pods {
		p, err := waitFixtureReady(ctx, cs, want)
		if err != nil {
			return nil, err
		}
		if p.Name == "canary" {
			fx.CanaryIP = p.Status.PodIP
		}
	}
	return fx, nil
}

// fixtureStarts bounds how many times a fixture pod whose container never
// started is made.
const fixtureStarts = 3

// waitFixtureReady waits for the fixture pod want to be Ready, making it
// again when its container never started: on a busy cgroup v1 node runc
// now and then fails a start ("unable to freeze"), and a pod that never
// restarts would leave every check that needs it INCONCLUSIVE. Only before
// any check runs: a fixture that failed later is never quietly replaced.
func waitFixtureReady(ctx context.Context, cs kubernetes.Interface, want *corev1.Pod) (*corev1.Pod, error) {
	pods := cs.CoreV1().Pods(want.Namespace)
	for start := 1; ; start++ {
		p, err := waitPodReady(ctx, cs, want.Namespace, want.Name, fixtureReadyTimeout)
		if err == nil || !errors.Is(err, errNeverStarted) || start == fixtureStarts {
			return p, err
		}
		zero := int64(0)
		if err := pods.Delete(ctx, want.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("delete pod %s/%s to make it again: %w", want.Namespace, want.Name, err)
		}
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, fixtureReadyTimeout, true, func(ctx context.Context) (bool, error) {
			_, err := pods.Get(ctx, want.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s not gone to be made again: %w", want.Namespace, want.Name, err)
		}
		if _, err := pods.Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create pod %s/%s again: %w", want.Namespace, want.Name, err)
		}
	}
}

// errNeverStarted: a pod ended without its container ever starting.
var errNeverStarted = errors.New("its container never started")

func waitPodReady(ctx context.Context, cs kubernetes.Interface, ns, name string, timeout time.Duration) (*corev1.Pod, error) {
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // keep polling through transient errors until the deadline
		}
		last = p
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			if kube.NeverStarted(p) {
				return false, fmt.Errorf("pod %s/%s ended: %w: %s", ns, name, errNeverStarted, podState(p))
			}
			return false, fmt.Errorf("pod %s/%s ended: %s", ns, name, podState(p))
		}
		return podReady(p), nil
	})
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s not Ready: %w (%s)", ns, name, err, podState(last))
	}
	return last, nil
}

// podState says why a pod is where it is, for errors.
func podState(p *corev1.Pod) string {
	if p == nil {
		return "never seen"
	}
	s := string(p.Status.Phase)
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case c.State.Waiting != nil:
			s += fmt.Sprintf(", %s waiting: %s %s", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message)
		case c.State.Terminated != nil:
			s += fmt.Sprintf(", %s terminated: %s exit %d", c.Name, c.State.Terminated.Reason, c.State.Terminated.ExitCode)
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			s += fmt.Sprintf(", %s: %s", c.Type, c.Message)
		}
	}
	return s
}

// cleanupFixtures deletes verify's namespace. It takes a context of its own
// so that it still runs after the run's context was cancelled (ctrl-C).
func cleanupFixtures(cs kubernetes.Interface, ns string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64),
		PropagationPolicy:  ptrTo(metav1.DeletePropagationBackground),
	})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete namespace %s: %w", ns, err)
	}
	return nil
}
