package kube

import (
	"net/netip"
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
)

func internetPolicy() *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{Spec: networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{
		To: []networkingv1.NetworkPolicyPeer{
			{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8", "172.16.0.0/12"}}},
			{IPBlock: &networkingv1.IPBlock{CIDR: "2000::/3", Except: []string{"2002::/16"}}},
		}}}}}
}

func prefixes(t *testing.T, s ...string) []netip.Prefix {
	t.Helper()
	p, err := ParsePrefixes(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFence: public node addresses are excepted in the block that allows
// them, private ones already are, and the policy leaves none open after;
// an address that goes is un-excepted, someone else's excepts stay, and a
// second pass changes nothing.
func TestFence(t *testing.T) {
	p := internetPolicy()
	p.Spec.Egress[0].To[0].IPBlock.Except = append(p.Spec.Egress[0].To[0].IPBlock.Except, "203.0.113.7/32") // the operator's
	want := prefixes(t, "198.51.100.2", "172.18.0.2", "2001:db8::1", "203.0.113.7", "192.0.2.0/28")
	if open := Exposed(p, want); len(open) != 3 {
		t.Fatalf("before: open %v, want the three public ones not yet excepted", open)
	}
	if !Fence(p, want) {
		t.Fatal("Fence changed nothing")
	}
	if open := Exposed(p, want); len(open) != 0 {
		t.Fatalf("after: still open %v; policy %+v", open, p.Spec.Egress)
	}
	v4 := p.Spec.Egress[0].To[0].IPBlock.Except
	if !slices.Contains(v4, "198.51.100.2/32") || !slices.Contains(v4, "192.0.2.0/28") || slices.Contains(v4, "172.18.0.2/32") {
		t.Errorf("v4 excepts %v", v4)
	}
	if v6 := p.Spec.Egress[0].To[1].IPBlock.Except; !slices.Contains(v6, "2001:db8::1/128") {
		t.Errorf("v6 excepts %v", v6)
	}
	if got := p.Annotations[FencedAnnotation]; got != "192.0.2.0/28,198.51.100.2/32,2001:db8::1/128" {
		t.Errorf("annotation %q", got)
	}
	if Fence(p, want) {
		t.Error("a second pass changed the policy")
	}
	// The node at 198.51.100.2 goes; so does the operator's address from
	// the wanted list, but its except is not serve's to remove.
	want = prefixes(t, "172.18.0.2", "2001:db8::1", "192.0.2.0/28")
	if !Fence(p, want) {
		t.Fatal("Fence kept a departed node's except")
	}
	v4 = p.Spec.Egress[0].To[0].IPBlock.Except
	if slices.Contains(v4, "198.51.100.2/32") || !slices.Contains(v4, "203.0.113.7/32") || !slices.Contains(v4, "10.0.0.0/8") {
		t.Errorf("after the node went: v4 excepts %v", v4)
	}
	if open := Exposed(p, prefixes(t, "198.51.100.2")); len(open) != 1 {
		t.Errorf("the departed node's address should be internet again: open %v", open)
	}
}

func TestParsePrefixes(t *testing.T) {
	got := prefixes(t, " 198.51.100.2 ", "10.1.2.3/8", "::ffff:192.0.2.1", "")
	if want := []netip.Prefix{netip.MustParsePrefix("198.51.100.2/32"), netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.1/32")}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if _, err := ParsePrefixes([]string{"node-1"}); err == nil {
		t.Error("a name was taken for an address")
	}
}

func TestPublic(t *testing.T) {
	for a, want := range map[string]bool{"198.51.100.2": true, "172.18.0.2": false, "10.96.0.1": false, "169.254.169.254": false,
		"100.64.1.1": false, "::ffff:192.168.1.1": false, "2001:db8::1": true, "2002::1": false, "fd00::1": false, "fe80::1": false} {
		if got := Public(netip.MustParseAddr(a)); got != want {
			t.Errorf("Public(%s) = %v, want %v", a, got, want)
		}
	}
}
