package pool

import (
	"context"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A lost node, as the pool sees it: its pods' runners stop answering at
// once, and some 40 s later the node lifecycle controller marks their
// Ready condition False.

// TestWarmPodThatLostReadinessIsReplaced: a warm pod whose Ready condition
// turns False while the rest of its status stands (what the node lifecycle
// controller writes for the pods of a node it lost) is neither handed out
// nor counted as a pod still starting: it is deleted and replaced at once,
// long before the startup deadline, so that the pool holds its target of
// pods a request can reach.
func TestWarmPodThatLostReadinessIsReplaced(t *testing.T) {
	e := newEnv(t, nil).start()
	e.waitWarm(3)
	lost := e.pods()[0].Name
	e.updatePod(lost, func(p *corev1.Pod) {
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.PodReady {
				p.Status.Conditions[i].Status = corev1.ConditionFalse
				p.Status.Conditions[i].LastTransitionTime = metav1.Now()
			}
		}
	})
	e.eventually("the pod that lost its readiness deleted", func() bool {
		_, err := e.cs.CoreV1().Pods(testNS).Get(context.Background(), lost, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	e.waitWarm(3)
	if got := e.creates.Load(); got != 4 {
		t.Errorf("creates = %d, want 4 (3 + one for the lost pod)", got)
	}
	for range 3 {
		if _, err := e.execute("x"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStartingPodIsNotTakenForLost: a pod not yet Ready, never Ready before,
// is still starting: it counts as supply until the startup deadline.
func TestStartingPodIsNotTakenForLost(t *testing.T) {
	e := newEnv(t, nil)
	e.autoReady.Store(false)
	e.start()
	e.eventually("3 pods created", func() bool { return len(e.pods()) == 3 })
	e.eventually("the informer shows them", func() bool {
		pods, _ := e.pool.lister.List(e.pool.selector)
		return len(pods) == 3
	})
	if pl := e.pool.plan(time.Now()); len(pl.remove) != 0 || len(pl.create) != 0 {
		t.Fatalf("plan for 3 starting pods: remove %v, create %v; want nothing", pl.remove, pl.create)
	}
}

// TestUnreachableNodeGoesLast: a runner that cannot be reached at all (no
// route to its node, as when the node is lost and the API still shows its
// pods Ready) sends its node's other pods to the back of the line: the
// request's next attempt goes to a pod on another node, not to the lost
// node's next-oldest pod.
func TestUnreachableNodeGoesLast(t *testing.T) {
	const lostIP = "127.0.0.2"
	var unreachable atomic.Int32
	d := &net.Dialer{Timeout: time.Second}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, _ := net.SplitHostPort(addr)
		if host == lostIP {
			unreachable.Add(1)
			return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}
		}
		return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
	}
	e := newEnv(t, nil, func(o *Options) { o.Dialer = dial; o.Size = 4 }).start()
	e.waitWarm(4)
	e.pool.mu.Lock()
	order := e.pool.candidatesLocked(time.Now())
	e.pool.mu.Unlock()
	// The three pods handed out first are on the lost node, the last on a
	// live one.
	for i, pod := range order {
		p, err := e.cs.CoreV1().Pods(testNS).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Spec.NodeName = "live"
		if i < 3 {
			p.Spec.NodeName, p.Status.PodIP = "lost", lostIP
		}
		if _, err := e.cs.CoreV1().Pods(testNS).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.eventually("the informer shows the nodes", func() bool {
		pods, _ := e.pool.lister.List(e.pool.selector)
		n := 0
		for _, p := range pods {
			if p.Spec.NodeName != "" {
				n++
			}
		}
		return n == 4
	})
	res, err := e.execute("x")
	if err != nil || res.Stdout != "ran: x" {
		t.Fatalf("got %+v, %v; want a run on the live node's pod", res, err)
	}
	if n := unreachable.Load(); n != 1 {
		t.Errorf("%d connections to the lost node, want 1: its other pods must go last", n)
	}
}
