package verify

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/verify/netsec"
)

// Names and properties of the network checks of the seal: DNS, serve's own
// pod, the node's ports and IPv6.
const (
	checkDNSExfil    = "network/dns-exfiltration"
	checkServePod    = "network/serve-pod"
	checkNodePorts   = "network/node-ports"
	checkIPv6        = "network/ipv6"
	propertyDNSExfil = "27"

	// exfilZone is the zone verify looks a random name up in when no canary
	// zone is given: reserved (RFC 2606), so no real server ever sees it.
	exfilZone = "sandbox-verify.invalid"
	// exfilFastMS is how quickly a sealed pod's lookup must fail: its answer
	// comes from its own runner, not over any network.
	exfilFastMS = 100
	// nodePortDeadlineS bounds the control's probe of one node port: a
	// listening port answers a handshake at once, and most of the ports
	// verify tries listen nowhere.
	nodePortDeadlineS = 3
	maxNodePorts      = 24
)

// wellKnownNodePorts are ports a Kubernetes node commonly listens on besides
// the kubelet's: ssh, etcd, the API server, the kubelet's read-only port,
// kube-proxy's metrics and health, the controller manager and scheduler,
// and common CNI agents' health and metrics (calico, cilium, kube-router).
var wellKnownNodePorts = []int{22, 2379, 2380, 6443, 9099, 9100, 9890, 9962, 10248, 10249, 10255, 10256, 10257, 10259, 20244}

// dnsMode is how a live snippet pod resolves names: sealed (its own
// runner, nothing else in resolv.conf) or cluster, with what showed it.
type dnsMode struct {
	sealed bool
	known  bool
	what   string
}

// snippetDNS reads the DNS of a live snippet pod's spec: the pods, not the
// Deployment's setting, are what runs snippets.
func (e *env) snippetDNS(ctx context.Context) dnsMode {
	pods, err := e.cs.CoreV1().Pods(e.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: snippetSelector})
	if err != nil {
		return dnsMode{what: fmt.Sprintf("list snippet pods: %v", err)}
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		m := dnsMode{known: true, sealed: sealedSpec(&p.Spec)}
		ns := "the cluster DNS (dnsPolicy " + string(p.Spec.DNSPolicy) + ")"
		if p.Spec.DNSConfig != nil && len(p.Spec.DNSConfig.Nameservers) > 0 {
			ns = "nameservers " + strings.Join(p.Spec.DNSConfig.Nameservers, ",") + " (dnsPolicy " + string(p.Spec.DNSPolicy) + ")"
		}
		m.what = fmt.Sprintf("pod %s: %s, label %s=%q", p.Name, ns, kube.LabelDNS, p.Labels[kube.LabelDNS])
		e.target["snippet_dns"] = map[bool]string{true: kube.DNSSealed, false: kube.DNSCluster}[m.sealed]
		return m
	}
	return dnsMode{what: "no snippet pod to read"}
}

// sealedSpec: the pod's only resolvers are its own loopback.
func sealedSpec(s *corev1.PodSpec) bool {
	if s.DNSPolicy != corev1.DNSNone || s.DNSConfig == nil || len(s.DNSConfig.Nameservers) == 0 {
		return false
	}
	for _, ns := range s.DNSConfig.Nameservers {
		if ip := net.ParseIP(ns); ip == nil || !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// exfilTarget is the lookup of a fresh random name: through the sandbox's
// own resolver, and, when a canary zone is given, through the control's,
// whose answer (the zone's own address) shows that such a name leaves the
// cluster.
func (e *env) exfilTarget(token string) netTarget {
	zone, answer := e.opts.DNSCanaryZone, e.opts.DNSCanaryAnswer
	if zone == "" {
		zone, answer = exfilZone, ""
	}
	return netTarget{Target: netsec.Target{Name: checkDNSExfil, Kind: netsec.Resolve,
		QName: token + "." + strings.TrimSuffix(zone, "."), Token: answer}, check: checkDNSExfil, property: propertyDNSExfil}
}

// judgeExfil is network/dns-exfiltration. Sealed: PASS when the sandbox's
// only resolvers are loopback, its lookup of a fresh name failed (fast), and
// it could not reach the cluster DNS itself (UDP or TCP) that the control
// reached; with a canary zone, the control must also have had the zone's
// answer, or nothing shows that such a lookup would leave. Cluster mode:
// SKIP, the channel is open by configuration and the caveats say so.
func judgeExfil(run *netRun, mode dnsMode, x netTarget, withZone bool) Result {
	if !mode.known {
		return result(checkDNSExfil, propertyDNSExfil, Inconclusive, "the snippet pods' DNS could not be read: %s", mode.what)
	}
	if !mode.sealed {
		return result(checkDNSExfil, propertyDNSExfil, Skip, "snippet DNS is in cluster mode (%s): lookups go to the cluster DNS by configuration; see the caveats", mode.what)
	}
	if run.sandbox == nil {
		return result(checkDNSExfil, propertyDNSExfil, Fail, "the sandbox's probe gave no usable answer: %v", run.sbErr)
	}
	sb := run.sandbox.Outcomes[x.Name]
	ev := []string{mode.what, "the sandbox's resolv.conf: " + orNone(run.sandbox.Resolvers),
		fmt.Sprintf("the sandbox looked up %s: %s", x.QName, sb.Describe())}
	if c := run.control[x.Name]; withZone {
		ev = append(ev, "the control looked it up too: "+c.Describe())
	}
	var clusterDNS []netTarget
	for _, t := range run.targets {
		if t.check == "network/dns-cluster-udp" || t.check == "network/dns-cluster-tcp" {
			clusterDNS = append(clusterDNS, t)
			ev = append(ev, fmt.Sprintf("cluster DNS %s %s: control %s; sandbox %s", t.Kind, t.Addr(),
				run.control[t.Name].Describe(), run.sandbox.Outcomes[t.Name].Describe()))
		}
	}
	evidence := strings.Join(ev, " | ")
	for _, r := range run.sandbox.Resolvers {
		if ip := net.ParseIP(r); ip == nil || !ip.IsLoopback() {
			return result(checkDNSExfil, propertyDNSExfil, Fail, "the sandbox resolves through %s, outside the pod: %s", r, evidence)
		}
	}
	if sb == nil || sb.Attempts == 0 {
		return result(checkDNSExfil, propertyDNSExfil, Fail, "the sandbox's lookup has no outcome: %s", evidence)
	}
	if sb.Reached || sb.Answered {
		return result(checkDNSExfil, propertyDNSExfil, Fail, "the sandbox resolved a fresh name, so its lookup left the pod: %s", evidence)
	}
	blocked := 0
	for _, t := range clusterDNS {
		switch netsec.CompareBlocked(t.Target, run.control[t.Name], run.sandbox.Outcomes[t.Name]) {
		case netsec.SandboxReached:
			return result(checkDNSExfil, propertyDNSExfil, Fail, "the sandbox reached the cluster DNS %s directly, which forwards names out: %s", t.Addr(), evidence)
		case netsec.Blocked:
			blocked++
		}
	}
	switch {
	case len(clusterDNS) == 0 || blocked < len(clusterDNS):
		return result(checkDNSExfil, propertyDNSExfil, Inconclusive, "the cluster DNS was not shown blocked (the control did not reach it, or it was not probed): %s", evidence)
	case withZone && !netsec.ControlOK(x.Target, run.control[x.Name]):
		return result(checkDNSExfil, propertyDNSExfil, Inconclusive, "the control did not get the canary zone's answer, so nothing shows the name would have left: %s", evidence)
	case sb.LookupMS > exfilFastMS:
		// Sealed all the same, but not as promised: a lookup that times out
		// looks like a network fault to the code that made it.
		return result(checkDNSExfil, propertyDNSExfil, Fail, "the lookup failed, but only after %d ms (the pod's own resolver should answer in well under %d ms): %s", sb.LookupMS, exfilFastMS, evidence)
	}
	return result(checkDNSExfil, propertyDNSExfil, Pass, "sealed: the lookup failed in %d ms inside the pod and the cluster DNS is out of reach: %s", sb.LookupMS, evidence)
}

func orNone(ss []string) string {
	if len(ss) == 0 {
		return "no nameserver"
	}
	return strings.Join(ss, ",")
}

// servePodTargets aim at serve's own pods (their IP and port) and its
// Service: the control reaches them (its namespace is a client's), and a
// snippet pod must not.
func (e *env) servePodTargets(ctx context.Context) ([]netTarget, []missingTarget) {
	svc, err := e.cs.CoreV1().Services(e.opts.Namespace).Get(ctx, e.opts.Service, metav1.GetOptions{})
	if err != nil {
		return nil, []missingTarget{{checkServePod, fmt.Sprintf("get service %s: %v", e.opts.Service, err)}}
	}
	var ts []netTarget
	add := func(name, host string, port int) {
		ts = append(ts, netTarget{Target: netsec.Target{Name: name, Kind: netsec.HTTP, Host: host, Port: port, Path: "/healthz"},
			check: checkServePod, property: "13"})
	}
	pods, err := e.cs.CoreV1().Pods(e.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: svc.Spec.Selector})})
	if err == nil {
		i := 0
		for _, p := range pods.Items {
			if p.Status.PodIP == "" || p.DeletionTimestamp != nil || i == maxPerGroup || len(svc.Spec.Ports) == 0 {
				continue
			}
			port := svc.Spec.Ports[0].TargetPort.IntValue()
			if port == 0 {
				port = namedPort(&p, svc.Spec.Ports[0].TargetPort.StrVal)
			}
			if port != 0 {
				add(fmt.Sprintf("serve-pod#%d", i), p.Status.PodIP, port)
				i++
			}
		}
	}
	if svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone && len(svc.Spec.Ports) > 0 {
		add("serve-service", svc.Spec.ClusterIP, int(svc.Spec.Ports[0].Port))
	}
	if len(ts) == 0 {
		return nil, []missingTarget{{checkServePod, "no serve pod with an IP and no ClusterIP"}}
	}
	return ts, nil
}

func namedPort(p *corev1.Pod, name string) int {
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == name {
				return int(port.ContainerPort)
			}
		}
	}
	return 0
}

// nodePortTargets aim at the nodes' other listening ports: well-known
// ones, the ports of host-network pods (their container and probe ports),
// host ports and NodePorts. The control finds which of them listen; the
// sandbox must reach none.
func (e *env) nodePortTargets(ctx context.Context) ([]netTarget, []missingTarget) {
	nodes, err := e.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, []missingTarget{{checkNodePorts, fmt.Sprintf("list nodes: %v", err)}}
	}
	ports := map[int]bool{}
	for _, p := range wellKnownNodePorts {
		ports[p] = true
	}
	if pods, err := e.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			for _, c := range p.Spec.Containers {
				for _, cp := range c.Ports {
					if cp.Protocol != corev1.ProtocolUDP && cp.Protocol != corev1.ProtocolSCTP {
						if cp.HostPort != 0 {
							ports[int(cp.HostPort)] = true
						} else if p.Spec.HostNetwork {
							ports[int(cp.ContainerPort)] = true
						}
					}
				}
				if p.Spec.HostNetwork {
					for _, pr := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
						if port := probePort(pr); port != 0 {
							ports[port] = true
						}
					}
				}
			}
		}
	}
	if svcs, err := e.cs.CoreV1().Services("").List(ctx, metav1.ListOptions{}); err == nil {
		for _, s := range svcs.Items {
			for _, sp := range s.Spec.Ports {
				if sp.NodePort != 0 && sp.Protocol != corev1.ProtocolUDP {
					ports[int(sp.NodePort)] = true
				}
			}
		}
	}
	var kubelet = map[int]bool{}
	var addrs []string
	for _, n := range nodes.Items {
		kubelet[int(n.Status.DaemonEndpoints.KubeletEndpoint.Port)] = true
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && net.ParseIP(a.Address).To4() != nil && len(addrs) < maxPerGroup {
				addrs = append(addrs, a.Address)
			}
		}
	}
	kubelet[10250] = true
	var list []int
	for p := range ports {
		if !kubelet[p] { // network/kubelet has the kubelet's own port
			list = append(list, p)
		}
	}
	sort.Ints(list)
	var ts []netTarget
	for _, a := range addrs {
		for _, p := range list {
			if len(ts) == maxNodePorts {
				break
			}
			ts = append(ts, netTarget{Target: netsec.Target{Name: fmt.Sprintf("node-port#%s:%d", a, p), Kind: netsec.TCP, Host: a, Port: p},
				check: checkNodePorts, property: "13", controlDeadlineS: nodePortDeadlineS})
		}
	}
	if len(ts) == 0 {
		return nil, []missingTarget{{checkNodePorts, "no node with an IPv4 InternalIP"}}
	}
	return ts, nil
}

func probePort(p *corev1.Probe) int {
	switch {
	case p == nil:
		return 0
	case p.HTTPGet != nil && p.HTTPGet.Host == "":
		return p.HTTPGet.Port.IntValue()
	case p.TCPSocket != nil && p.TCPSocket.Host == "":
		return p.TCPSocket.Port.IntValue()
	}
	return 0
}

// ipv6Targets aim, where the cluster has IPv6, at the pod's IPv6 gateway
// (link-local, on the kubelet's port: a node service listening on every
// address answers there too), the nodes' IPv6 addresses, the API server's
// IPv6 Service address and the metadata service's IPv6 address. Without
// IPv6 the check does not apply: a SKIP naming what was looked at.
func (e *env) ipv6Targets(ctx context.Context) ([]netTarget, *Result) {
	var seen []string
	nodes, err := e.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, &Result{Name: checkIPv6, Property: "13", Status: Inconclusive, Evidence: fmt.Sprintf("list nodes: %v", err)}
	}
	var ts []netTarget
	add := func(name, host string, port int) {
		ts = append(ts, netTarget{Target: netsec.Target{Name: name, Kind: netsec.TCP, Host: host, Port: port}, check: checkIPv6, property: "13"})
	}
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if ip := net.ParseIP(a.Address); ip != nil && ip.To4() == nil && (a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP) {
				port := int(n.Status.DaemonEndpoints.KubeletEndpoint.Port)
				if port == 0 {
					port = 10250
				}
				add("ipv6-node#"+a.Address, a.Address, port)
			}
		}
	}
	seen = append(seen, fmt.Sprintf("%d node(s)", len(nodes.Items)))
	if svc, err := e.cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{}); err == nil && len(svc.Spec.Ports) > 0 {
		for _, ip := range svc.Spec.ClusterIPs {
			if p := net.ParseIP(ip); p != nil && p.To4() == nil {
				add("ipv6-apiserver-service", ip, int(svc.Spec.Ports[0].Port))
			}
		}
		seen = append(seen, "the kubernetes Service's ClusterIPs "+strings.Join(svc.Spec.ClusterIPs, ","))
	}
	podHas6 := false
	if pods, err := e.cs.CoreV1().Pods(e.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: snippetSelector}); err == nil {
		for _, p := range pods.Items {
			for _, ip := range p.Status.PodIPs {
				if a := net.ParseIP(ip.IP); a != nil && a.To4() == nil {
					podHas6 = true
				}
			}
		}
		seen = append(seen, fmt.Sprintf("the PodIPs of %d snippet pod(s)", len(pods.Items)))
	}
	if len(ts) == 0 && !podHas6 {
		return nil, &Result{Name: checkIPv6, Property: "13", Status: Skip,
			Evidence: "not applicable: the cluster has no IPv6 (looked at " + strings.Join(seen, ", ") + ")"}
	}
	add("ipv6-gateway", netsec.Gateway6, 10250)
	if e.opts.MetadataAddr6 != "" {
		if host, port, err := splitHostPort(e.opts.MetadataAddr6); err == nil {
			ts = append(ts, netTarget{Target: netsec.Target{Name: "ipv6-metadata", Kind: netsec.HTTP, Host: host, Port: port},
				check: checkIPv6, property: "13"})
		}
	}
	return ts, nil
}
