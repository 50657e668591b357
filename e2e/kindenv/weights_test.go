package kindenv

import (
	"os"
	"regexp"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// TestControlPlaneOutweighsNoSandboxPod holds the control plane's CPU
// request, which the node image build reads from hack/lib.sh, at most the
// sandbox pods' own: under load a snippet gets at least the share of a
// control-plane pod.
func TestControlPlaneOutweighsNoSandboxPod(t *testing.T) {
	b, err := os.ReadFile("../hack/lib.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CONTROL_PLANE_CPU_REQUEST=(\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("hack/lib.sh sets no CONTROL_PLANE_CPU_REQUEST")
	}
	cp, err := resource.ParseQuantity(string(m[1]))
	if err != nil {
		t.Fatalf("CONTROL_PLANE_CPU_REQUEST: %v", err)
	}
	if cp.Cmp(resource.MustParse(PodCPURequest)) > 0 {
		t.Errorf("the control plane requests %s, more than a sandbox pod's %s", m[1], PodCPURequest)
	}
}
