package kube

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// NetworkPolicy's ipBlocks say nothing of what an address is: a node, or the
// API server behind a load balancer, may have an address outside every
// private range, and tool pods' "internet" would reach it. serve fences
// those addresses off: it adds each one, as a host prefix, to the excepts of
// every ipBlock of the tool pods' internet policy that would allow it.

// FencedAnnotation lists, comma-separated, the excepts serve added to a
// policy, so that it removes them when their node or endpoint goes, and
// never an except someone else wrote.
const FencedAnnotation = "sandbox.dev/fenced"

// Special are the ranges the manifests' tool internet policy excepts
// (manifests/toolpolicy.yaml; a test there keeps the two the same): an
// address in one is never internet, and its except is the policy's, which
// the tool pods' seal proves in place. The fence takes only the others.
var Special = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	// IPv6 internet is global unicast (2000::/3) less these.
	netip.MustParsePrefix("2001::/32"), netip.MustParsePrefix("2002::/16"),
}

var global6 = netip.MustParsePrefix("2000::/3")

// Public reports whether the tool pods' internet policy would allow a,
// its excepts as the manifests write them: what the fence must cover.
func Public(a netip.Addr) bool {
	a = a.Unmap()
	if a.Is6() && !global6.Contains(a) {
		return false
	}
	return !slices.ContainsFunc(Special, func(p netip.Prefix) bool { return p.Contains(a) })
}

// KubeletPort is the kubelet's port where a Node does not say.
const KubeletPort = 10250

// Host is a as a prefix of its own.
func Host(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

// ParsePrefixes reads CIDRs, or bare addresses as host prefixes.
func ParsePrefixes(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, Host(a.Unmap()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%q is neither an address nor a CIDR", s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// NodeAddrs are the IP addresses a Node's status lists, of every type.
func NodeAddrs(n *corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, a := range n.Status.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			out = append(out, ip.Unmap())
		}
	}
	return out
}

// EndpointAddrs are an EndpointSlice's endpoint addresses, and its first
// port (0 without one).
func EndpointAddrs(s *discoveryv1.EndpointSlice) ([]netip.Addr, int) {
	var out []netip.Addr
	for _, ep := range s.Endpoints {
		for _, a := range ep.Addresses {
			if ip, err := netip.ParseAddr(a); err == nil {
				out = append(out, ip.Unmap())
			}
		}
	}
	port := 0
	if len(s.Ports) > 0 && s.Ports[0].Port != nil {
		port = int(*s.Ports[0].Port)
	}
	return out, port
}

// Exposed lists the prefixes of want that some ipBlock of p's egress
// allows and none of its excepts covers: what p leaves open to them.
func Exposed(p *networkingv1.NetworkPolicy, want []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, w := range want {
		if exposed(p, w) {
			out = append(out, w)
		}
	}
	return out
}

func exposed(p *networkingv1.NetworkPolicy, w netip.Prefix) bool {
	for _, r := range p.Spec.Egress {
		for _, to := range r.To {
			if b := to.IPBlock; b != nil && overlaps(b.CIDR, w) && !covered(b.Except, w) {
				return true
			}
		}
	}
	return false
}

func overlaps(cidr string, w netip.Prefix) bool {
	p, err := netip.ParsePrefix(cidr)
	return err == nil && p.Overlaps(w)
}

// covered reports whether one of excepts holds all of w.
func covered(excepts []string, w netip.Prefix) bool {
	return slices.ContainsFunc(excepts, func(e string) bool {
		p, err := netip.ParsePrefix(e)
		return err == nil && p.Bits() <= w.Bits() && p.Contains(w.Addr())
	})
}

// within reports whether w lies wholly in cidr, as an except must.
func within(cidr string, w netip.Prefix) bool {
	p, err := netip.ParsePrefix(cidr)
	return err == nil && p.Bits() <= w.Bits() && p.Contains(w.Addr())
}

// Fence edits p so that each ipBlock that would allow a prefix of want
// excepts it, and drops the excepts it added before (listed in
// FencedAnnotation) that want no longer holds. It reports whether p
// changed.
func Fence(p *networkingv1.NetworkPolicy, want []netip.Prefix) bool {
	keep := map[string]bool{}
	for _, w := range want {
		keep[w.Masked().String()] = true
	}
	var before []string
	if v := p.Annotations[FencedAnnotation]; v != "" {
		before = strings.Split(v, ",")
	}
	changed := false
	fenced := map[string]bool{}
	for i := range p.Spec.Egress {
		for j := range p.Spec.Egress[i].To {
			b := p.Spec.Egress[i].To[j].IPBlock
			if b == nil {
				continue
			}
			// What serve added and no longer wants goes; the rest stays.
			n := len(b.Except)
			b.Except = slices.DeleteFunc(b.Except, func(e string) bool { return slices.Contains(before, e) && !keep[e] })
			changed = changed || len(b.Except) != n
			for _, w := range want {
				e := w.Masked().String()
				switch {
				case !within(b.CIDR, w):
				case slices.Contains(b.Except, e):
					if slices.Contains(before, e) {
						fenced[e] = true
					}
				case covered(b.Except, w):
					// someone else's wider except holds it
				default:
					b.Except = append(b.Except, e)
					fenced[e] = true
					changed = true
				}
			}
		}
	}
	list := make([]string, 0, len(fenced))
	for e := range fenced {
		list = append(list, e)
	}
	slices.Sort(list)
	if v := strings.Join(list, ","); v != p.Annotations[FencedAnnotation] {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[FencedAnnotation] = v
		changed = true
	}
	return changed
}
