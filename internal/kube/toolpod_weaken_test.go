package kube

import (
	"slices"
	"testing"

	"github.com/sandboxd/sandbox/internal/weaken"
)

// TestToolPodWeakened: the weakenings verify's tool-call checks must catch
// reach the tool pod, and the zero Set leaves it hardened.
func TestToolPodWeakened(t *testing.T) {
	o := ToolPodOptions{Namespace: "sandbox", Image: "agent:dev", SandboxImage: "sandbox:dev", Owner: Owner{Name: "serve"}}
	p := ToolPod(o, "sandbox-tool-x", MinUID)
	if *p.Spec.AutomountServiceAccountToken || !*p.Spec.SecurityContext.RunAsNonRoot || *p.Spec.SecurityContext.RunAsUser == 0 {
		t.Fatalf("the unweakened tool pod is not hardened: %+v", p.Spec.SecurityContext)
	}
	if slices.Contains(p.Spec.Containers[0].Args, "--weaken") {
		t.Errorf("unweakened runner args %v", p.Spec.Containers[0].Args)
	}
	set, err := weaken.Parse([]string{string(weaken.ToolRootToken), string(weaken.KillLeaderOnly), string(weaken.UnprovenReady)}, false)
	if err != nil {
		t.Fatal(err)
	}
	o.Weaken = set
	p = ToolPod(o, "sandbox-tool-x", MinUID)
	c := p.Spec.Containers[0]
	if !*p.Spec.AutomountServiceAccountToken || *p.Spec.SecurityContext.RunAsUser != 0 || *c.SecurityContext.RunAsUser != 0 || *c.SecurityContext.RunAsNonRoot {
		t.Errorf("tool-root-token did not make a root pod with the token: %+v", c.SecurityContext)
	}
	if i := slices.Index(c.Args, "--weaken"); i < 0 || c.Args[i+1] != string(weaken.KillLeaderOnly) ||
		!slices.Contains(c.Args, string(weaken.UnprovenReady)) {
		t.Errorf("the runner weakenings are not handed to the tool pod's runner: %v", c.Args)
	}
}

// TestToolPodCPURequest: serve's --pod-cpu-request lowers the tool pod's
// request (not its limit), so that it schedules on a small node.
func TestToolPodCPURequest(t *testing.T) {
	o := ToolPodOptions{Namespace: "sandbox", Image: "agent:dev", SandboxImage: "sandbox:dev", Owner: Owner{Name: "serve"}, CPURequest: "100m"}
	p := ToolPod(o, "sandbox-tool-x", MinUID)
	for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
		if r, l := c.Resources.Requests.Cpu().String(), c.Resources.Limits.Cpu().String(); r != "100m" || l != ToolCPU {
			t.Errorf("%s: cpu request %s limit %s, want 100m and %s", c.Name, r, l, ToolCPU)
		}
	}
}
