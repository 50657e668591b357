package kube

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func intstrName(name string) intstr.IntOrString { return intstr.FromString(name) }

// IsReady reports whether the pod's Ready condition is true and it has an IP:
// the runner's readiness probe passed and the pool can reach it.
func IsReady(pod *corev1.Pod) bool {
	if pod.Status.PodIP == "" || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// IsClaimed reports whether a pool recorded handing pod out.
func IsClaimed(pod *corev1.Pod) bool {
	return pod.Annotations[AnnotationClaimedBy] != ""
}

// IsFinished reports whether the pod will never run anything again.
func IsFinished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// NeverStarted reports whether a container of pod ended without ever
// having started (the kubelet's StartError: the runtime failed to create
// it, as runc's "unable to freeze" does now and then on a busy cgroup v1
// node). Nothing of the pod's own ran, so making it again is safe.
func NeverStarted(pod *corev1.Pod) bool {
	for _, c := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
		if t := c.State.Terminated; t != nil && t.Reason == "StartError" {
			return true
		}
	}
	return false
}

// Death says why a pod stopped, from its last known status.
type Death struct {
	// Dead is false when the status shows nothing wrong (yet).
	Dead bool
	// OOMKilled is true when the runner container was killed for memory.
	OOMKilled bool
	// Reason is a short sentence for an error message.
	Reason string
}

// DeathOf reads the pod's status for the reason it died. gone says the pod
// has been deleted from the API, in which case pod is its last known state
// (or nil).
func DeathOf(pod *corev1.Pod, gone bool) Death {
	if pod == nil {
		return Death{Dead: true, Reason: "the pod was deleted"}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != RunnerContainer || cs.State.Terminated == nil {
			continue
		}
		t := cs.State.Terminated
		if t.Reason == "OOMKilled" {
			return Death{Dead: true, OOMKilled: true, Reason: "the pod ran out of memory and was killed"}
		}
		if !isBenign(pod) {
			break
		}
		return Death{Dead: true, Reason: fmt.Sprintf("the runner exited with code %d%s", t.ExitCode, paren(t.Reason))}
	}
	if pod.Status.Reason == "Evicted" {
		return Death{Dead: true, Reason: "the pod was evicted" + colon(pod.Status.Message)}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return Death{Dead: true, Reason: fmt.Sprintf("the pod was disrupted (%s)%s", c.Reason, colon(c.Message))}
		}
	}
	if pod.Status.Phase == corev1.PodFailed {
		return Death{Dead: true, Reason: "the pod failed" + paren(pod.Status.Reason) + colon(pod.Status.Message)}
	}
	if pod.DeletionTimestamp != nil || gone {
		return Death{Dead: true, Reason: "the pod was deleted"}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == RunnerContainer && cs.State.Terminated != nil {
			t := cs.State.Terminated
			return Death{Dead: true, Reason: fmt.Sprintf("the runner exited with code %d%s", t.ExitCode, paren(t.Reason))}
		}
	}
	return Death{}
}

// ExitedCleanly reports a runner that ended by itself with code 0, as it
// does right after answering its one job: the end of a run, not a death
// during one.
func ExitedCleanly(pod *corev1.Pod) bool {
	if pod == nil || !isBenign(pod) || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == RunnerContainer && cs.State.Terminated != nil {
			return cs.State.Terminated.ExitCode == 0 && cs.State.Terminated.Reason != "OOMKilled"
		}
	}
	return false
}

// isBenign reports a pod whose only trouble is its own container's exit:
// no eviction, disruption or deletion that would explain it better.
func isBenign(pod *corev1.Pod) bool {
	if pod.Status.Reason != "" || pod.DeletionTimestamp != nil {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return false
		}
	}
	return true
}

// RunnerMessage is the runner container's termination message ("" while
// it runs): what it wrote last, by the pods' FallbackToLogsOnError.
func RunnerMessage(pod *corev1.Pod) string {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == RunnerContainer && cs.State.Terminated != nil {
			return cs.State.Terminated.Message
		}
	}
	return ""
}

// Unschedulable returns the scheduler's message when it cannot place the
// pod (e.g. "0/1 nodes are available: 1 Insufficient cpu."), else "".
func Unschedulable(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			if c.Message == "" {
				return c.Reason
			}
			return c.Message
		}
	}
	return ""
}

// WaitingReason describes why a pod is not Ready yet, e.g. "ErrImagePull:
// ...", for logs about pods stuck starting.
func WaitingReason(pod *corev1.Pod) string {
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return w.Reason + colon(w.Message)
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Reason != "" {
			return string(c.Type) + " " + c.Reason + colon(c.Message)
		}
	}
	return string(pod.Status.Phase)
}

func paren(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func colon(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	return ": " + s
}
