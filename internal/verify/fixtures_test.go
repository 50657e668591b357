package verify

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sandboxd/sandbox/internal/verify/netsec"
)

// fixtureCluster is a fake clientset whose kubelet fails the container start
// of the first failures pods created (StartError, as runc's "unable to
// freeze" does) and makes every later one Ready. It counts the creates.
func fixtureCluster(failures int) (*fake.Clientset, *int) {
	cs := fake.NewClientset()
	creates := 0
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		creates++
		if creates <= failures {
			p.Status.Phase = corev1.PodFailed
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Name, State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{Reason: "StartError", ExitCode: 128, Message: "runc create failed: unable to freeze"},
			}}}
		} else {
			p.Status.Phase = corev1.PodRunning
			p.Status.PodIP = "10.0.0.7"
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}
		return false, nil, nil
	})
	return cs, &creates
}

// TestFixtureThatNeverStartedIsMadeAgain: a fixture pod whose container
// failed to start is made again, up to fixtureStarts in all; a pod that
// started and then ended is not (the control: the error is not swallowed).
func TestFixtureThatNeverStartedIsMadeAgain(t *testing.T) {
	pod := netsec.CanaryPod("verify-ns", "sandbox:dev", "token")

	cs, creates := fixtureCluster(1)
	if _, err := cs.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := waitFixtureReady(t.Context(), cs, pod)
	if err != nil || p.Status.PodIP != "10.0.0.7" || *creates != 2 {
		t.Fatalf("after one failed start: pod %v, err %v, creates %d; want it Ready after 2 creates", p, err, *creates)
	}

	cs, creates = fixtureCluster(fixtureStarts)
	if _, err := cs.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := waitFixtureReady(t.Context(), cs, pod); !errors.Is(err, errNeverStarted) || *creates != fixtureStarts {
		t.Fatalf("failing every start: err %v, creates %d; want errNeverStarted after %d creates", err, *creates, fixtureStarts)
	}

	cs = fake.NewClientset()
	ended := pod.DeepCopy()
	ended.Status.Phase = corev1.PodFailed
	ended.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "canary", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1},
	}}}
	if _, err := cs.CoreV1().Pods(pod.Namespace).Create(t.Context(), ended, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := waitFixtureReady(t.Context(), cs, pod); err == nil || errors.Is(err, errNeverStarted) {
		t.Fatalf("a pod that ran and failed: err %v; want its failure, not a retry", err)
	}
}
