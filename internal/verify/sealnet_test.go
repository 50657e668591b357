package verify

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandboxd/sandbox/internal/verify/netsec"
)

func TestSealedSpec(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		want bool
	}{
		{"sealed", corev1.PodSpec{DNSPolicy: corev1.DNSNone, DNSConfig: &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.1"}}}, true},
		{"cluster first", corev1.PodSpec{DNSPolicy: corev1.DNSClusterFirst}, false},
		{"none with an outside resolver too", corev1.PodSpec{DNSPolicy: corev1.DNSNone, DNSConfig: &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.1", "10.96.0.10"}}}, false},
		{"none without a resolver", corev1.PodSpec{DNSPolicy: corev1.DNSNone, DNSConfig: &corev1.PodDNSConfig{}}, false},
	} {
		if got := sealedSpec(&tc.spec); got != tc.want {
			t.Errorf("%s: sealed = %v", tc.name, got)
		}
	}
}

// exfilRun is a sealed network run: the sandbox's lookup and its direct
// probes of the cluster DNS, and the control's.
func exfilRun(resolvers []string, lookup, dnsUDP *netsec.Outcome, control *netsec.Outcome) (*netRun, netTarget) {
	udp := netTarget{Target: netsec.Target{Name: "network/dns-cluster-udp", Kind: netsec.DNSUDP, Host: "10.96.0.10", Port: 53, QName: "k"}, check: "network/dns-cluster-udp", property: "14"}
	tcp := udp
	tcp.Name, tcp.check, tcp.Kind = "network/dns-cluster-tcp", "network/dns-cluster-tcp", netsec.DNSTCP
	x := netTarget{Target: netsec.Target{Name: checkDNSExfil, Kind: netsec.Resolve, QName: "c2VjcmV0.exfil.sandbox.test", Token: "198.51.100.53"}, check: checkDNSExfil, property: propertyDNSExfil}
	answered := &netsec.Outcome{Reached: true, Answered: true, Attempts: 1}
	refused := &netsec.Outcome{Attempts: 12, Error: "ConnectionRefusedError(111)"}
	if dnsUDP == nil {
		dnsUDP = refused
	}
	return &netRun{
		targets: []netTarget{udp, tcp},
		control: map[string]*netsec.Outcome{udp.Name: answered, tcp.Name: answered, x.Name: control},
		sandbox: &netsec.Report{Resolvers: resolvers, Outcomes: map[string]*netsec.Outcome{udp.Name: dnsUDP, tcp.Name: refused, x.Name: lookup}},
	}, x
}

func TestJudgeExfil(t *testing.T) {
	sealed := dnsMode{known: true, sealed: true, what: "pod p: nameservers 127.0.0.1"}
	nx := &netsec.Outcome{Kind: netsec.Resolve, Attempts: 1, LookupMS: 2, Error: "gaierror(-2): Name or service not known"}
	slow := &netsec.Outcome{Kind: netsec.Resolve, Attempts: 1, LookupMS: 5000, Error: "gaierror(-3): Temporary failure in name resolution"}
	leaked := &netsec.Outcome{Kind: netsec.Resolve, Attempts: 1, Reached: true, Answered: true, Token: true, Addrs: []string{"198.51.100.53"}}
	canary := &netsec.Outcome{Kind: netsec.Resolve, Attempts: 1, Reached: true, Answered: true, Token: true, Addrs: []string{"198.51.100.53"}}
	dnsAnswered := &netsec.Outcome{Reached: true, Answered: true, Attempts: 1}
	for _, tc := range []struct {
		name      string
		mode      dnsMode
		resolvers []string
		lookup    *netsec.Outcome
		dnsUDP    *netsec.Outcome
		control   *netsec.Outcome
		zone      bool
		want      Status
	}{
		{"sealed", sealed, []string{"127.0.0.1"}, nx, nil, canary, true, Pass},
		{"sealed, no canary zone", sealed, []string{"127.0.0.1"}, nx, nil, nil, false, Pass},
		{"the name resolved", sealed, []string{"127.0.0.1"}, leaked, nil, canary, true, Fail},
		{"the cluster DNS answered the sandbox", sealed, []string{"127.0.0.1"}, nx, dnsAnswered, canary, true, Fail},
		{"a resolver outside the pod", sealed, []string{"127.0.0.1", "10.96.0.10"}, nx, nil, canary, true, Fail},
		{"a slow failure", sealed, []string{"127.0.0.1"}, slow, nil, canary, true, Fail},
		{"no lookup outcome", sealed, []string{"127.0.0.1"}, nil, nil, canary, true, Fail},
		{"the control missed the canary zone", sealed, []string{"127.0.0.1"}, nx, nil, nx, true, Inconclusive},
		{"cluster mode", dnsMode{known: true, what: "pod p: the cluster DNS"}, []string{"10.96.0.10"}, leaked, dnsAnswered, canary, true, Skip},
		{"mode unknown", dnsMode{what: "no snippet pod"}, nil, nx, nil, canary, true, Inconclusive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run, x := exfilRun(tc.resolvers, tc.lookup, tc.dnsUDP, tc.control)
			r := judgeExfil(run, tc.mode, x, tc.zone)
			if r.Status != tc.want || r.Name != checkDNSExfil {
				t.Errorf("%s %s, want %s: %s", r.Name, r.Status, tc.want, r.Evidence)
			}
		})
	}
	// The cluster DNS targets are judged as blocked ones in sealed mode: a
	// sandbox answer fails them.
	run, _ := exfilRun([]string{"127.0.0.1"}, nx, dnsAnswered, canary)
	if st := statusOf(t, judgeNetwork(run), "network/dns-cluster-udp"); st != Fail {
		t.Errorf("sealed, the sandbox got a cluster DNS answer: %s", st)
	}
	run, _ = exfilRun([]string{"127.0.0.1"}, nx, nil, canary)
	if st := statusOf(t, judgeNetwork(run), "network/dns-cluster-udp"); st != Pass {
		t.Errorf("sealed, the cluster DNS blocked: %s", st)
	}
}

// TestJudgeNewTargets: serve's pods, node ports and IPv6 are blocked
// groups: PASS when the control reached one the sandbox did not, FAIL on
// any sandbox reach, whatever the control saw.
func TestJudgeNewTargets(t *testing.T) {
	serve := netTarget{Target: netsec.Target{Name: "serve-pod#0", Kind: netsec.HTTP, Host: "10.244.0.5", Port: 8080, Path: "/healthz"}, check: checkServePod, property: "13"}
	port := netTarget{Target: netsec.Target{Name: "node-port#172.18.0.2:2379", Kind: netsec.TCP, Host: "172.18.0.2", Port: 2379}, check: checkNodePorts, property: "13", controlDeadlineS: 3}
	closed := netTarget{Target: netsec.Target{Name: "node-port#172.18.0.2:22", Kind: netsec.TCP, Host: "172.18.0.2", Port: 22}, check: checkNodePorts, property: "13", controlDeadlineS: 3}
	gw := netTarget{Target: netsec.Target{Name: "ipv6-gateway", Kind: netsec.TCP, Host: "fe80::1%eth0", Port: 10250}, check: checkIPv6, property: "13"}
	reached := &netsec.Outcome{Reached: true, Answered: true, Attempts: 1}
	refused := &netsec.Outcome{Attempts: 12, Error: "ConnectionRefusedError(111)"}
	run := &netRun{
		targets: []netTarget{serve, port, closed, gw},
		control: map[string]*netsec.Outcome{serve.Name: reached, port.Name: reached, closed.Name: refused, gw.Name: reached},
		sandbox: &netsec.Report{Outcomes: map[string]*netsec.Outcome{serve.Name: refused, port.Name: refused, closed.Name: refused, gw.Name: refused}},
	}
	for _, n := range []string{checkServePod, checkNodePorts, checkIPv6} {
		if st := statusOf(t, judgeNetwork(run), n); st != Pass {
			t.Errorf("%s = %s, want PASS", n, st)
		}
	}
	for _, tg := range []netTarget{serve, closed, gw} {
		run.sandbox.Outcomes[tg.Name] = reached
		if st := statusOf(t, judgeNetwork(run), tg.check); st != Fail {
			t.Errorf("%s: the sandbox reached %s: %s, want FAIL", tg.check, tg.Addr(), st)
		}
		run.sandbox.Outcomes[tg.Name] = refused
	}
}
