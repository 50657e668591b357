package bench

import (
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandboxd/sandbox/internal/kube"
)

// A churn copy must stay under the snippet pods' policies (they select
// RunnerSelector), out of every pool, and out of the bench's count of the
// pools' pods.
func TestSandboxPodLikeIsNoPoolsPod(t *testing.T) {
	owner := kube.Owner{Name: "sandbox-abc", UID: "u1", Incarnation: "i1"}
	tmpl := kube.SnippetPod(kube.PodOptions{Namespace: "sandbox", Image: "img", Owner: owner}, "sandbox-x", 1234)
	tmpl.Spec.NodeName = "node-1"
	tmpl.Annotations = map[string]string{kube.AnnotationClaimedBy: "sandbox-abc"}
	p := sandboxPodLike(tmpl, "bench-churn-1")

	set := labels.Set(p.Labels)
	if !kube.RunnerSelector().Matches(set) {
		t.Errorf("labels %v: not a snippet pod, so not under its policies", p.Labels)
	}
	if kube.PoolSelector(owner).Matches(set) || kube.OwnerSelector(owner.Name).Matches(set) {
		t.Errorf("labels %v: the pool of %s would see it", p.Labels, owner.Name)
	}
	if !kube.OwnerSelector(churnOwner).Matches(set) {
		t.Errorf("labels %v: the churn's own watch would not see it", p.Labels)
	}
	if poolPods().Matches(set) {
		t.Errorf("labels %v: counted among the pools' pods", p.Labels)
	}
	if !poolPods().Matches(labels.Set(tmpl.Labels)) {
		t.Errorf("labels %v: the pool's own pod is not counted", tmpl.Labels)
	}
	if len(p.OwnerReferences) != 0 || p.Spec.NodeName != "" || len(p.Annotations) != 0 || p.Name != "bench-churn-1" {
		t.Errorf("copy keeps the original's placement or record: %+v", p.ObjectMeta)
	}
	if tmpl.Labels[kube.LabelOwner] != "sandbox-abc" {
		t.Errorf("the template's labels changed: %v", tmpl.Labels)
	}
	if got, want := p.Spec.Containers[0].Args, tmpl.Spec.Containers[0].Args; len(got) != len(want) {
		t.Errorf("runner args %q, want the pool pod's %q", got, want)
	}
}

// The sandbox churn's copies request the bare pods' CPU, so that as many
// fit; their limits, and the pool's own pod, stay as they were.
func TestFittedRequestsBareCPU(t *testing.T) {
	tmpl := kube.SnippetPod(kube.PodOptions{Namespace: "sandbox", Image: "img", CPURequest: "50m"}, "sandbox-x", 1234)
	p := fitted(sandboxPodLike(tmpl, "bench-churn-1"))
	res := p.Spec.Containers[0].Resources
	if got := res.Requests.Cpu().String(); got != bareCPU {
		t.Errorf("copy requests %s of CPU, want the bare pods' %s", got, bareCPU)
	}
	if got := res.Limits.Cpu().String(); got != kube.SnippetCPU {
		t.Errorf("copy's CPU limit %s, want the snippet pods' %s", got, kube.SnippetCPU)
	}
	if got := tmpl.Spec.Containers[0].Resources.Requests.Cpu().String(); got != "50m" {
		t.Errorf("the pool's pod now requests %s", got)
	}
}
