package verify

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/verify/netsec"
)

// Checks NetworkPolicy is silent on: ICMP, which it does not cover, and the
// cluster's own machines at addresses outside the private ranges, which an
// ipBlock cannot tell from the internet.
const (
	checkNetICMP      = "network/icmp"
	checkToolICMP     = "toolcalls/icmp"
	propertyICMP      = "29"
	checkToolNodes    = "toolcalls/node-addresses"
	propertyToolNodes = "30"
	// maxNodeTargets bounds toolcalls/node-addresses' targets.
	maxNodeTargets = 24
	// apiServerPort is where kubeadm's API server listens on its nodes.
	apiServerPort = 6443
)

// clusterAddrs are every address of every node, with its kubelet port, and
// every API server endpoint, with its port, as the API lists them.
func (e *env) clusterAddrs(ctx context.Context) (nodes, endpoints []netip.AddrPort, err error) {
	ns, err := e.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("list nodes: %w", err)
	}
	for _, n := range ns.Items {
		port := int(n.Status.DaemonEndpoints.KubeletEndpoint.Port)
		if port == 0 {
			port = kube.KubeletPort
		}
		for _, a := range kube.NodeAddrs(&n) {
			nodes = append(nodes, netip.AddrPortFrom(a, uint16(port)))
		}
	}
	eps, err := e.cs.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(ctx,
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kubernetes"})
	if err != nil {
		return nodes, nil, fmt.Errorf("list the kubernetes EndpointSlices: %w", err)
	}
	for _, s := range eps.Items {
		as, port := kube.EndpointAddrs(&s)
		for _, a := range as {
			endpoints = append(endpoints, netip.AddrPortFrom(a, uint16(port)))
		}
	}
	return nodes, endpoints, nil
}

// icmpTargets are echo targets for check: the nodes, verify's canary pod
// and the stand-ins, each of which answers echo where the path is open.
func (e *env) icmpTargets(ctx context.Context, fx *fixtures, check string) []netTarget {
	var hosts []string
	if nodes, _, err := e.clusterAddrs(ctx); err == nil {
		for i, n := range nodes {
			if i < maxPerGroup {
				hosts = append(hosts, n.Addr().String())
			}
		}
	}
	hosts = append(hosts, fx.CanaryIP)
	for _, a := range []string{e.opts.MetadataAddr, e.opts.InternetAddr} {
		if h, _, err := splitHostPort(a); err == nil {
			hosts = append(hosts, h)
		}
	}
	var ts []netTarget
	for i, h := range hosts {
		ts = append(ts, netTarget{Target: netsec.Target{Name: fmt.Sprintf("%s#%d", check, i), Kind: netsec.ICMP, Host: h},
			check: check, property: propertyICMP})
	}
	return ts
}

// nodeAddrTargets are toolcalls/node-addresses': every node address on its
// kubelet's port and the API server's, every API server endpoint, and the
// addresses serve's --tool-egress-deny names (their first address), on the
// same two ports. Most are private, which the private ranges' checks cover
// too; the public ones are what only this check covers.
func (e *env) nodeAddrTargets(ctx context.Context, dep *appsv1.Deployment) ([]netTarget, error) {
	nodes, endpoints, err := e.clusterAddrs(ctx)
	var aps []netip.AddrPort
	aps = append(aps, endpoints...)
	for _, n := range nodes {
		aps = append(aps, n, netip.AddrPortFrom(n.Addr(), apiServerPort))
	}
	env, args, _ := serveContainer(dep)
	deny := env["SANDBOX_TOOL_EGRESS_DENY"]
	if v, ok := flagValue(args, "tool-egress-deny"); ok {
		deny = v
	}
	ps, perr := kube.ParsePrefixes(strings.Split(deny, ","))
	if perr != nil && err == nil {
		err = fmt.Errorf("serve's SANDBOX_TOOL_EGRESS_DENY: %w", perr)
	}
	for _, p := range ps {
		aps = append(aps, netip.AddrPortFrom(p.Addr(), kube.KubeletPort), netip.AddrPortFrom(p.Addr(), apiServerPort))
	}
	var ts []netTarget
	seen := map[netip.AddrPort]bool{}
	for _, ap := range aps {
		if seen[ap] || len(ts) == maxNodeTargets {
			continue
		}
		seen[ap] = true
		ts = append(ts, netTarget{Target: netsec.Target{Name: fmt.Sprintf("%s#%d", checkToolNodes, len(ts)), Kind: netsec.TCP,
			Host: ap.Addr().String(), Port: int(ap.Port())}, check: checkToolNodes, property: propertyToolNodes,
			controlDeadlineS: 4})
	}
	return ts, err
}
