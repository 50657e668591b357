package manifests

import (
	"net"
	"net/netip"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/sandboxd/sandbox/internal/kube"
)

// allowedBy reports whether ip is inside one of the policy's ipBlocks and
// outside its excepts: what the NetworkPolicy engine lets a tool pod reach.
func allowedBy(t *testing.T, np *networkingv1.NetworkPolicy, ip string) bool {
	t.Helper()
	addr := net.ParseIP(ip)
	for _, rule := range np.Spec.Egress {
		for _, peer := range rule.To {
			if peer.IPBlock == nil {
				continue
			}
			_, block, err := net.ParseCIDR(peer.IPBlock.CIDR)
			if err != nil {
				t.Fatal(err)
			}
			if !block.Contains(addr) {
				continue
			}
			excepted := false
			for _, e := range peer.IPBlock.Except {
				_, ex, err := net.ParseCIDR(e)
				if err != nil {
					t.Fatal(err)
				}
				excepted = excepted || ex.Contains(addr)
			}
			if !excepted {
				return true
			}
		}
	}
	return false
}

func TestToolPolicies(t *testing.T) {
	m := mustObjects(t, Options{})
	serveLabels := m["Deployment/sandbox"].(*appsv1.Deployment).Spec.Template.Labels
	tool := func(internet bool) map[string]string {
		return kube.ToolPod(kube.ToolPodOptions{Namespace: "sandbox", Image: "x", SandboxImage: "y", Owner: kube.Owner{Name: "o"}, Internet: internet}, "p", kube.MinUID).Labels
	}
	snippet := kube.SnippetPod(kube.PodOptions{Namespace: "sandbox", Image: "x", Owner: kube.Owner{Name: "o"}}, "p", kube.MinUID).Labels

	base := m["NetworkPolicy/sandbox-tool"].(*networkingv1.NetworkPolicy)
	internet := m["NetworkPolicy/sandbox-tool-internet"].(*networkingv1.NetworkPolicy)
	if !selects(base.Spec.PodSelector.MatchLabels, tool(true)) || !selects(base.Spec.PodSelector.MatchLabels, tool(false)) ||
		selects(base.Spec.PodSelector.MatchLabels, snippet) || selects(base.Spec.PodSelector.MatchLabels, serveLabels) {
		t.Errorf("sandbox-tool selects %v", base.Spec.PodSelector.MatchLabels)
	}
	if !selects(internet.Spec.PodSelector.MatchLabels, tool(true)) || selects(internet.Spec.PodSelector.MatchLabels, tool(false)) ||
		selects(internet.Spec.PodSelector.MatchLabels, snippet) {
		t.Errorf("sandbox-tool-internet selects %v: want internet tool pods only", internet.Spec.PodSelector.MatchLabels)
	}
	if len(base.Spec.Ingress) != 1 || len(base.Spec.Ingress[0].From) != 1 ||
		!selects(base.Spec.Ingress[0].From[0].PodSelector.MatchLabels, serveLabels) ||
		base.Spec.Ingress[0].From[0].NamespaceSelector != nil || base.Spec.Ingress[0].Ports[0].Port.IntValue() != kube.DefaultRunnerPort {
		t.Errorf("tool ingress %+v: want only serve pods on the runner port", base.Spec.Ingress)
	}
	if len(base.Spec.Egress) != 1 || base.Spec.Egress[0].To[0].PodSelector.MatchLabels["k8s-app"] != "kube-dns" {
		t.Errorf("tool base egress %+v: want cluster DNS only", base.Spec.Egress)
	}
	if !slices.Equal(internet.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) || len(internet.Spec.Ingress) != 0 {
		t.Errorf("sandbox-tool-internet must add egress only: %+v", internet.Spec)
	}
	for _, tt := range []struct {
		ip   string
		want bool
	}{
		{"198.51.100.10", true}, // the e2e internet stand-in
		{"8.8.8.8", true},
		{"2606:4700::1111", true},
		{"169.254.169.254", false}, // metadata
		{"10.96.0.1", false},
		{"10.244.0.5", false},
		{"172.18.0.2", false},
		{"192.168.1.1", false},
		{"100.100.100.200", false}, // a cloud's metadata, carrier NAT
		{"127.0.0.1", false},
		{"0.0.0.1", false},
		{"fd00::1", false},
		{"fe80::1", false},
		{"::ffff:10.0.0.1", false}, // net.ParseIP maps it to 10.0.0.1: refused either way
		{"64:ff9b::a00:1", false},
		{"2002:a00:1::", false},
		{"::1", false},
	} {
		if got := allowedBy(t, internet, tt.ip); got != tt.want {
			t.Errorf("internet egress to %s: allowed=%v, want %v", tt.ip, got, tt.want)
		}
		if allowedBy(t, base, tt.ip) {
			t.Errorf("base tool policy allows %s by address", tt.ip)
		}
	}
}

func TestToolOptions(t *testing.T) {
	m := mustObjects(t, Options{ToolImages: []string{"reg.example/agents/", "agent:dev=api.example.com,*.example.org"}, NoToolInternet: true})
	env := map[string]string{}
	for _, e := range m["Deployment/sandbox"].(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env["SANDBOX_TOOL_IMAGES"] != "reg.example/agents/;agent:dev=api.example.com,*.example.org" || env["SANDBOX_TOOL_INTERNET_EGRESS"] != "false" {
		t.Errorf("tool env %v", env)
	}
	if _, err := Objects(Options{ToolImages: []string{"a*b"}}); err == nil {
		t.Error("a * inside an allow-list entry was accepted")
	}
	if _, err := Objects(Options{ToolImages: []string{"a:1=x..example"}}); err == nil {
		t.Error("a bad egress was accepted")
	}
}

// TestFenceKnowsThePolicy: kube.Public, which decides what serve's fence
// covers, says of an address what the shipped tool internet policy says.
func TestFenceKnowsThePolicy(t *testing.T) {
	np := mustObjects(t, Options{})["NetworkPolicy/sandbox-tool-internet"].(*networkingv1.NetworkPolicy)
	for _, p := range kube.Special {
		for _, a := range []netip.Addr{p.Addr(), p.Masked().Addr().Next()} {
			if allowedBy(t, np, a.String()) || kube.Public(a) {
				t.Errorf("%s (in %s): policy allows %v, Public %v", a, p, allowedBy(t, np, a.String()), kube.Public(a))
			}
		}
	}
	for _, a := range []string{"198.51.100.2", "8.8.8.8", "2606:4700::1", "fd00::1", "172.32.0.1", "100.128.0.1"} {
		if got := kube.Public(netip.MustParseAddr(a)); got != allowedBy(t, np, a) {
			t.Errorf("%s: Public %v, the policy allows %v", a, got, allowedBy(t, np, a))
		}
	}
}
