package toolpod

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func node(name string, addrs ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, a := range addrs {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: a})
	}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: name})
	return n
}

// TestFenceFollowsNodes: the fence excepts the nodes' and the API server's
// public addresses and the extra ones, refuses calls until the live policy does, follows a
// node that joins and one that leaves, and gives some to the pods' proof.
func TestFenceFollowsNodes(t *testing.T) {
	port := int32(443)
	cs := fake.NewClientset(
		node("n1", "198.51.100.2", "172.18.0.2"),
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default",
			Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"203.0.113.5"}}},
			Ports:     []discoveryv1.EndpointPort{{Port: &port}}},
		&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: InternetPolicy, Namespace: "sandbox"},
			Spec: networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{
				{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"172.16.0.0/12"}}}}}}}},
	)
	f := NewFence(FenceOptions{Client: cs, Namespace: "sandbox", Extra: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/28")}})
	if err := f.Check(); err == nil {
		t.Fatal("Check passed before the fence knew anything")
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go f.Run(ctx)
	excepts := func() []string {
		p, err := cs.NetworkingV1().NetworkPolicies("sandbox").Get(ctx, InternetPolicy, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Spec.Egress[0].To[0].IPBlock.Except
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("%s: excepts %v, check %v", what, excepts(), f.Check())
			}
		}
	}
	waitFor("fenced", func() bool { return f.Check() == nil })
	if got := excepts(); !slices.Equal(got, []string{"172.16.0.0/12", "203.0.113.5/32", "198.51.100.2/32", "192.0.2.0/28"}) {
		t.Errorf("excepts %v", got)
	}
	// 172.18.0.2 is private: the policy's own except covers it.
	if got := strings.Join(f.SealProbes(), " "); got != "203.0.113.5:443 198.51.100.2:10250 192.0.2.0:10250" {
		t.Errorf("seal probes %q", got)
	}

	// A node joins: until the policy excepts it, calls are refused.
	if _, err := cs.CoreV1().Nodes().Create(ctx, node("n2", "198.51.100.3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("n2 fenced", func() bool { return slices.Contains(excepts(), "198.51.100.3/32") && f.Check() == nil })
	// One leaves: its address is internet again.
	if err := cs.CoreV1().Nodes().Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("n1 unfenced", func() bool { return !slices.Contains(excepts(), "198.51.100.2/32") })
	if !slices.Contains(excepts(), "198.51.100.3/32") || !slices.Contains(excepts(), "172.16.0.0/12") {
		t.Errorf("after n1 left: %v", excepts())
	}
}

// TestFenceRefusesAnOpenPolicy: someone re-applies the policy without the
// fence's excepts; Check fails until the fence has written them again.
func TestFenceRefusesAnOpenPolicy(t *testing.T) {
	f := NewFence(FenceOptions{Client: fake.NewClientset(node("n1", "198.51.100.2"))})
	f.synced = true
	if err := f.Check(); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("no policy: %v", err)
	}
	_ = f.policies.GetStore().Add(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: InternetPolicy},
		Spec: networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{
			{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}}}}}})
	_ = f.nodes.GetStore().Add(node("n1", "198.51.100.2"))
	if err := f.Check(); err == nil || !strings.Contains(err.Error(), "198.51.100.2/32") {
		t.Errorf("open policy: %v", err)
	}
}
