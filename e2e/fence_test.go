//go:build e2e

package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/sandboxd/sandbox/e2e/kindenv"
)

// ghostNode is a Node object with no kubelet behind it, unschedulable and
// tainted so that nothing lands on it, whose address is the internet
// stand-in's: a node with a public address joining and leaving.
const ghostNode = "sandbox-e2e-ghost"

// TestFenceFollowsNodes: the internet stand-in answers a tool pod (the
// control); a node joins whose ExternalIP is that address, and serve's
// fence excepts it from the tool pods' internet within seconds, so the
// next tool pod cannot reach it; the node leaves, and it answers again.
func TestFenceFollowsNodes(t *testing.T) {
	f := features.New("serve fences off the addresses of nodes as they come and go").
		WithLabel("needs", "service").
		Setup(withService).
		Assess("a joining node's address is fenced off, and opened when it leaves", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			if err := ServiceErr(ctx); err != nil {
				t.Fatal(err)
			}
			cs := clientset(ctx, t)
			ip := Standins(ctx).Internet.IP
			reached := func(when string) bool {
				t.Helper()
				res := mustCall(ctx, t, toolCall("tools.sample:metadata", []any{Standins(ctx).Internet.URL()}, nil, 30, nil))
				var v struct {
					Reached bool   `json:"reached"`
					Error   string `json:"error"`
				}
				decodeValue(t, res, &v)
				t.Logf("%s: tool pod reached %s: %v %s", when, ip, v.Reached, v.Error)
				return v.Reached
			}
			fenced := func() bool {
				p, err := cs.NetworkingV1().NetworkPolicies(kindenv.Namespace).Get(ctx, "sandbox-tool-internet", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range p.Spec.Egress {
					for _, to := range r.To {
						if to.IPBlock != nil && slices.Contains(to.IPBlock.Except, ip+"/32") {
							return true
						}
					}
				}
				return false
			}
			waitFence := func(want bool) time.Duration {
				t.Helper()
				start := time.Now()
				if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true,
					func(context.Context) (bool, error) { return fenced() == want, nil }); err != nil {
					t.Fatalf("the policy's except of %s/32 is still %v after 30 s", ip, !want)
				}
				return time.Since(start)
			}
			if fenced() || !reached("before the node") {
				t.Fatalf("control: the stand-in must answer a tool pod before any node has its address (fenced %v)", fenced())
			}
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ghostNode},
				Spec: corev1.NodeSpec{Unschedulable: true,
					Taints: []corev1.Taint{{Key: "sandbox.dev/e2e-ghost", Effect: corev1.TaintEffectNoExecute}}},
				Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeExternalIP, Address: ip}}}}
			if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), ghostNode, metav1.DeleteOptions{}) })
			t.Logf("node %s joined with ExternalIP %s: fenced after %s", ghostNode, ip, waitFence(true).Round(time.Millisecond))
			if reached("with the node") {
				t.Errorf("a tool pod reached %s, the address of node %s", ip, ghostNode)
			}
			if err := cs.CoreV1().Nodes().Delete(ctx, ghostNode, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Logf("node %s left: unfenced after %s", ghostNode, waitFence(false).Round(time.Millisecond))
			if !reached("after the node") {
				t.Errorf("the stand-in is no longer reached once node %s left", ghostNode)
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, f)
}
