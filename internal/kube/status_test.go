package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestNeverStarted(t *testing.T) {
	term := func(reason string, code int32) []corev1.ContainerStatus {
		return []corev1.ContainerStatus{{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: reason, ExitCode: code}}}}
	}
	for name, c := range map[string]struct {
		st   corev1.PodStatus
		want bool
	}{
		"pending":                         {corev1.PodStatus{Phase: corev1.PodPending}, false},
		"container StartError":            {corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: term("StartError", 128)}, true},
		"init container StartError":       {corev1.PodStatus{Phase: corev1.PodFailed, InitContainerStatuses: term("StartError", 128)}, true},
		"container ran and failed":        {corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: term("Error", 1)}, false},
		"init container ran and finished": {corev1.PodStatus{Phase: corev1.PodFailed, InitContainerStatuses: term("Completed", 0), ContainerStatuses: term("OOMKilled", 137)}, false},
	} {
		if got := NeverStarted(&corev1.Pod{Status: c.st}); got != c.want {
			t.Errorf("%s: NeverStarted %t, want %t", name, got, c.want)
		}
	}
}
