package bench

import (
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandboxd/sandbox/kube"
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
