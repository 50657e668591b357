//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/sandboxd/sandbox/e2e/kindenv"
)

// servicePort is the container port behind Service sandbox (80 -> 8080).
const servicePort = 8080

// forwardToService port-forwards a local port to a Ready pod of the sandbox
// Deployment (what `kubectl port-forward svc/sandbox` does) and returns the
// base URL. The forward stops when the test ends.
func forwardToService(ctx context.Context, t *testing.T, cfg *envconf.Config) string {
	t.Helper()
	base, _ := forwardToServe(ctx, t, cfg, podReady)
	return base
}

// forwardToServe port-forwards a local port to the first pod of the sandbox
// Deployment that pick accepts, waiting for one, and returns the base URL
// and the pod's name. Tests that need a serve pod that is not Ready (its
// pool empty on purpose) pick it by another rule.
func forwardToServe(ctx context.Context, t *testing.T, cfg *envconf.Config, pick func(corev1.Pod) bool) (string, string) {
	t.Helper()
	if err := ServiceErr(ctx); err != nil {
		t.Fatal(err)
	}
	r := cfg.Client().Resources()
	cs, err := kubernetes.NewForConfig(r.GetConfig())
	if err != nil {
		t.Fatal(err)
	}
	// The serve pod is not Ready while its pool has no warm pod (it is
	// refilling after earlier tests): wait for one rather than fail.
	var pod string
	var seen []corev1.Pod
	err = wait.For(func(ctx context.Context) (bool, error) {
		var err error
		if seen, err = servePods(ctx, cs); err != nil {
			return false, err
		}
		for _, p := range seen {
			if p.DeletionTimestamp == nil && pick(p) {
				pod = p.Name
				return true, nil
			}
		}
		return false, nil
	}, wait.WithContext(ctx), wait.WithTimeout(3*time.Minute), wait.WithInterval(time.Second))
	if err != nil {
		t.Fatalf("no suitable pod of deployment %s: %v; its pods: %s", kindenv.Deployment, err, describePods(seen))
	}

	transport, upgrader, err := spdy.RoundTripperFor(r.GetConfig())
	if err != nil {
		t.Fatal(err)
	}
	url := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(kindenv.Namespace).Name(pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", servicePort)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatalf("port-forward: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	t.Cleanup(func() {
		close(stop)
		<-done
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("port-forward to %s: %v", pod, err)
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) == 0 {
		t.Fatalf("port-forward ports: %v", err)
	}
	t.Logf("service pod %s forwarded to 127.0.0.1:%d", pod, ports[0].Local)
	return fmt.Sprintf("http://127.0.0.1:%d", ports[0].Local), pod
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// servePods lists the pods of the sandbox Deployment, by its own selector.
func servePods(ctx context.Context, cs kubernetes.Interface) ([]corev1.Pod, error) {
	dep, err := cs.AppsV1().Deployments(kindenv.Namespace).Get(ctx, kindenv.Deployment, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get deployment: %w", err)
	}
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("deployment selector: %w", err)
	}
	l, err := cs.CoreV1().Pods(kindenv.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// describePods says, for a failure message, what state each pod was last
// seen in: enough to tell a pod that never started from one never Ready.
func describePods(pods []corev1.Pod) string {
	if len(pods) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, p := range pods {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s (uid %s, created %s, phase %s, ready %t", p.Name, p.UID,
			p.CreationTimestamp.UTC().Format(time.TimeOnly), p.Status.Phase, podReady(p))
		if p.DeletionTimestamp != nil {
			b.WriteString(", deleting")
		}
		for _, c := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, ", %s restarts %d", c.Name, c.RestartCount)
			if w := c.State.Waiting; w != nil {
				fmt.Fprintf(&b, " waiting %s: %s", w.Reason, w.Message)
			}
			if x := c.LastTerminationState.Terminated; x != nil {
				fmt.Fprintf(&b, " last %s: %s", x.Reason, x.Message)
			}
		}
		b.WriteString(")")
	}
	return b.String()
}
