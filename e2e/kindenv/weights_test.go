package kindenv

import (
	"os"
	"regexp"
	"testing"
)

// TestControlPlaneWeighsAsASandboxPod holds the control plane's CPU request,
// which the node image build reads from hack/lib.sh, equal to the sandbox
// pods' own: under load the two divide the node's CPU as equals.
func TestControlPlaneWeighsAsASandboxPod(t *testing.T) {
	b, err := os.ReadFile("../hack/lib.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CONTROL_PLANE_CPU_REQUEST=(\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("hack/lib.sh sets no CONTROL_PLANE_CPU_REQUEST")
	}
	if string(m[1]) != PodCPURequest {
		t.Errorf("the control plane requests %s, a sandbox pod %s", m[1], PodCPURequest)
	}
}
