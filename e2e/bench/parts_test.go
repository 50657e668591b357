package bench

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandboxd/sandbox/internal/kube"
)

func TestPodLadder(t *testing.T) {
	owner := kube.Owner{Name: "sandbox-abc", UID: "u1"}
	seal := kube.SealOptions{Probes: []string{"10.96.0.1:443"}, DNS: []string{"10.96.0.10:53"}, DNSName: "x."}
	tmpl := kube.SnippetPod(kube.PodOptions{Namespace: "sandbox", Image: "img", Owner: owner, Seal: seal}, "sandbox-x", 1234)
	ladder := podLadder(tmpl, "bench")
	if len(ladder) < 3 {
		t.Fatalf("%d rungs", len(ladder))
	}

	top := ladder[len(ladder)-1]
	if got, want := top.pod("p"), sandboxPodLike(tmpl, "p"); top.ns != tmpl.Namespace || !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("top rung in %s is not the sandbox churn's pod:\n%+v\nwant\n%+v", top.ns, got, want)
	}
	for i, r := range ladder[:len(ladder)-1] {
		p := r.pod("p")
		if r.ns != "bench" || p.Namespace != "bench" || kube.RunnerSelector().Matches(labels.Set(p.Labels)) {
			t.Errorf("rung %q: in %s/%s with labels %v, want the bench's namespace and no snippet pod's labels", r.what, r.ns, p.Namespace, p.Labels)
		}
		// Each rung is the one above it with a part taken out.
		if above := ladder[i+1].pod("p"); equality.Semantic.DeepEqual(p.Spec, above.Spec) {
			t.Errorf("rung %q: the same spec as the one above it", r.what)
		}
	}

	runner := ladder[len(ladder)-2].pod("p").Spec.Containers[0].Args
	if !slices.Equal(runner[len(runner)-2:], []string{"--seal-probe", refusedProbe}) ||
		slices.Contains(runner, seal.Probes[0]) || slices.Contains(runner, "--seal-dns") || slices.Contains(runner, seal.DNSName) {
		t.Errorf("runner rung args %q: want the template's without its seal targets, proving against %s", runner, refusedProbe)
	}
	if want := withoutFlags(tmpl.Spec.Containers[0].Args, "--seal-probe", "--seal-dns", "--seal-dns-name"); !slices.Equal(runner[:len(runner)-2], want) {
		t.Errorf("runner rung args %q, want %q first", runner, want)
	}

	for _, r := range ladder[:5] {
		if p := r.pod("p"); slices.Contains(p.Spec.Containers[0].Args, "--resolver") || p.Spec.DNSConfig != nil {
			t.Errorf("rung %q has the runner's resolver", r.what)
		}
	}

	bare := ladder[0].pod("p")
	if bare.Spec.SecurityContext.SeccompProfile != nil || bare.Spec.Containers[0].SecurityContext != nil ||
		!slices.Equal(bare.Spec.Containers[0].Command, bareCommand) || bare.Spec.Containers[0].ReadinessProbe != nil || len(bare.Spec.Volumes) != 0 {
		t.Errorf("bottom rung is not a bare pod: %+v", bare.Spec)
	}

	// Pods are fresh copies: one rung's pod changed leaves the others and
	// the template alone.
	ladder[0].pod("p").Spec.SecurityContext.RunAsUser = nil
	if ladder[0].pod("p").Spec.SecurityContext.RunAsUser == nil || tmpl.Spec.SecurityContext.SeccompProfile == nil {
		t.Error("rung pods share their parts")
	}
}

func TestWithoutFlags(t *testing.T) {
	got := withoutFlags([]string{"run", "--a", "1", "--b", "2", "--c", "3"}, "--a", "--c")
	if want := []string{"run", "--b", "2"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
