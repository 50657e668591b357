package egress

import (
	"net/netip"
	"slices"
)

// special is every IPv4 range that is not the public internet (IANA's
// special-purpose registry), with the name a refusal gives. An answer in
// one of them is refused: a name that resolves into the cluster, the
// node's network or the metadata service is DNS rebinding, however the
// name came to point there.
var special = []struct {
	p    netip.Prefix
	name string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this network"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (CGNAT)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.169.254/32"), "cloud metadata"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("192.88.99.0/24"), "6to4 relay anycast"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	// IPv6: global unicast (2000::/3) only, so fc00::/7 (unique local, the
	// metadata service's fd00:ec2::254), fe80::/10, ::1, ff00::/8,
	// 64:ff9b::/96 (NAT64, which reaches IPv4 inside) are refused below;
	// and these inside it, which carry IPv4 addresses or are not routed.
	{netip.MustParsePrefix("2001::/23"), "IETF protocol assignments (Teredo)"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("2002::/16"), "6to4"},
	{netip.MustParsePrefix("3fff::/20"), "documentation"},
}

var globalUnicast6 = netip.MustParsePrefix("2000::/3")

// refusedRange names the range that keeps a from being dialled ("" : a
// public address), after permit (addresses an operator lets through
// despite their range: a test's loopback, the kind rig's stand-ins) and
// deny (addresses never dialled, whatever their range: the nodes', the
// API server's), deny winning.
func refusedRange(a netip.Addr, permit, deny []netip.Prefix) string {
	a = a.Unmap()
	if slices.ContainsFunc(deny, func(p netip.Prefix) bool { return p.Contains(a) }) {
		return "denied by the operator (a node or the API server)"
	}
	if slices.ContainsFunc(permit, func(p netip.Prefix) bool { return p.Contains(a) }) {
		return ""
	}
	if a.Is6() && !globalUnicast6.Contains(a) {
		switch {
		case a.IsLoopback():
			return "loopback"
		case a.IsLinkLocalUnicast():
			return "link-local"
		case a.IsPrivate():
			return "unique local (private)"
		case a.IsMulticast():
			return "multicast"
		}
		return "not global unicast IPv6"
	}
	for _, s := range special {
		if s.p.Contains(a) {
			return s.name + " (" + s.p.String() + ")"
		}
	}
	return ""
}
