package manifests

import (
	"net"
	"net/netip"
	"slices"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/toolpod"
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
	if len(base.Spec.Egress) != 0 || !slices.Contains(base.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
		t.Errorf("tool base egress %+v: want nothing (the policies for each egress add to it)", base.Spec.Egress)
	}
	dns := m["NetworkPolicy/sandbox-tool-dns"].(*networkingv1.NetworkPolicy)
	if len(dns.Spec.Egress) != 1 || dns.Spec.Egress[0].To[0].PodSelector.MatchLabels["k8s-app"] != "kube-dns" || len(dns.Spec.Egress[0].To) != 1 {
		t.Errorf("tool DNS egress %+v: want cluster DNS only", dns.Spec.Egress)
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

// selectsPod is what the NetworkPolicy engine does with a pod selector,
// match expressions included.
func selectsPod(t *testing.T, sel metav1.LabelSelector, l map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(&sel)
	if err != nil {
		t.Fatal(err)
	}
	return !s.Empty() && s.Matches(labels.Set(l))
}

// TestToolEgressPolicies: which policies select a tool pod follows its
// egress: none gets no egress rule at all, gateway only the gateway's
// pods on the proxy port, dns the cluster DNS, internet the DNS and the
// internet. The gateway takes connections from gateway tool pods only, and
// reaches the internet less the same ranges as tool pods' internet.
func TestToolEgressPolicies(t *testing.T) {
	m := mustObjects(t, Options{})
	tool := func(egress string) map[string]string {
		return kube.ToolPod(kube.ToolPodOptions{Namespace: "sandbox", Image: "x", SandboxImage: "y", Owner: kube.Owner{Name: "o"}, Egress: egress}, "p", kube.MinUID).Labels
	}
	policies := []string{"sandbox-tool", "sandbox-tool-dns", "sandbox-tool-internet", "sandbox-tool-gateway", "sandbox-egress"}
	for egress, want := range map[string][]string{
		kube.EgressNone:     {"sandbox-tool"},
		kube.EgressGateway:  {"sandbox-tool", "sandbox-tool-gateway"},
		kube.EgressDNS:      {"sandbox-tool", "sandbox-tool-dns"},
		kube.EgressInternet: {"sandbox-tool", "sandbox-tool-dns", "sandbox-tool-internet"},
	} {
		var got []string
		for _, name := range policies {
			np := m["NetworkPolicy/"+name].(*networkingv1.NetworkPolicy)
			if selectsPod(t, np.Spec.PodSelector, tool(egress)) {
				got = append(got, name)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("a tool pod with egress %s is selected by %v, want %v", egress, got, want)
		}
	}

	gwDep := m["Deployment/sandbox-egress"].(*appsv1.Deployment)
	gwLabels := gwDep.Spec.Template.Labels
	toGW := m["NetworkPolicy/sandbox-tool-gateway"].(*networkingv1.NetworkPolicy)
	if len(toGW.Spec.Egress) != 1 || len(toGW.Spec.Egress[0].To) != 1 || toGW.Spec.Egress[0].To[0].IPBlock != nil ||
		toGW.Spec.Egress[0].To[0].NamespaceSelector != nil || !selects(toGW.Spec.Egress[0].To[0].PodSelector.MatchLabels, gwLabels) ||
		len(toGW.Spec.Egress[0].Ports) != 1 || toGW.Spec.Egress[0].Ports[0].Port.IntValue() != toolpod.DefaultGatewayPort {
		t.Errorf("sandbox-tool-gateway egress %+v: want the gateway's pods on %d only", toGW.Spec.Egress, toolpod.DefaultGatewayPort)
	}

	gw := m["NetworkPolicy/sandbox-egress"].(*networkingv1.NetworkPolicy)
	if !selects(gw.Spec.PodSelector.MatchLabels, gwLabels) || selects(gw.Spec.PodSelector.MatchLabels, tool(kube.EgressGateway)) {
		t.Errorf("sandbox-egress selects %v", gw.Spec.PodSelector.MatchLabels)
	}
	if len(gw.Spec.Ingress) != 1 || len(gw.Spec.Ingress[0].From) != 1 || gw.Spec.Ingress[0].From[0].NamespaceSelector != nil {
		t.Fatalf("gateway ingress %+v", gw.Spec.Ingress)
	}
	from := gw.Spec.Ingress[0].From[0].PodSelector
	for egress, want := range map[string]bool{kube.EgressGateway: true, kube.EgressInternet: false, kube.EgressNone: false, kube.EgressDNS: false} {
		if selectsPod(t, *from, tool(egress)) != want {
			t.Errorf("gateway ingress from a %s tool pod: %v, want %v", egress, !want, want)
		}
	}
	if selects(from.MatchLabels, kube.SnippetPod(kube.PodOptions{Namespace: "sandbox", Image: "x", Owner: kube.Owner{Name: "o"}}, "p", kube.MinUID).Labels) {
		t.Error("gateway ingress from snippet pods")
	}
	internet := m["NetworkPolicy/sandbox-tool-internet"].(*networkingv1.NetworkPolicy)
	for _, ip := range []string{"8.8.8.8", "2606:4700::1111", "169.254.169.254", "10.244.0.5", "192.168.1.1", "100.100.100.200", "fd00::1", "2002:a00:1::"} {
		if allowedBy(t, gw, ip) != allowedBy(t, internet, ip) {
			t.Errorf("%s: the gateway may reach it %v, tool pods' internet %v", ip, allowedBy(t, gw, ip), allowedBy(t, internet, ip))
		}
	}
	if first := gw.Spec.Egress[0]; first.To[0].IPBlock == nil || first.To[0].IPBlock.CIDR != DefaultAPIServerCIDRs[0] {
		t.Errorf("gateway egress %+v: the API server rule comes first", first)
	}

	// The gateway: hardened, two replicas, its own account reading pods.
	s := gwDep.Spec.Template.Spec
	c := s.Containers[0]
	if *gwDep.Spec.Replicas != 2 || s.ServiceAccountName != "sandbox-egress" || c.Args[0] != "egress" || c.Image != DefaultImage ||
		!*s.SecurityContext.RunAsNonRoot || *c.SecurityContext.AllowPrivilegeEscalation || !*c.SecurityContext.ReadOnlyRootFilesystem ||
		!slices.Equal(c.SecurityContext.Capabilities.Drop, []corev1.Capability{"ALL"}) || s.HostNetwork {
		t.Errorf("gateway deployment %+v", s)
	}
	role := m["Role/sandbox-egress"].(*rbacv1.Role)
	if len(role.Rules) != 2 || !slices.Equal(role.Rules[0].Resources, []string{"pods"}) || !slices.Equal(role.Rules[0].Verbs, []string{"get", "list", "watch"}) ||
		!slices.Equal(role.Rules[1].ResourceNames, []string{toolpod.InternetPolicy}) || !slices.Equal(role.Rules[1].Verbs, []string{"get", "list", "watch"}) {
		t.Errorf("gateway role %+v: want pods and the tool internet policy by name, read only", role.Rules)
	}
	rb := m["RoleBinding/sandbox-egress"].(*rbacv1.RoleBinding)
	if rb.RoleRef.Name != "sandbox-egress" || rb.Subjects[0].Name != "sandbox-egress" {
		t.Errorf("gateway binding %+v", rb)
	}
	svc := m["Service/sandbox-egress"].(*corev1.Service)
	if !selects(svc.Spec.Selector, gwLabels) || svc.Spec.Ports[0].Port != toolpod.DefaultGatewayPort || c.Ports[0].ContainerPort != toolpod.DefaultGatewayPort ||
		c.Args[2] != ":"+strconv.Itoa(toolpod.DefaultGatewayPort) {
		t.Errorf("gateway service %+v, container ports %+v, args %v", svc.Spec, c.Ports, c.Args)
	}
	if selects(m["Service/sandbox"].(*corev1.Service).Spec.Selector, gwLabels) {
		t.Error("the API's Service selects the gateway's pods")
	}

	// Options reach it.
	m = mustObjects(t, Options{Namespace: "sb", Image: "reg.example/sandbox:v2", ToolEgressDeny: []string{"203.0.113.9"},
		EgressPermit: []string{"198.51.100.0/24"}, APIServerCIDRs: []string{"192.0.2.10/32"}, ToolDefaultEgress: "none"})
	d := m["Deployment/sandbox-egress"].(*appsv1.Deployment)
	env := map[string]string{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if d.Namespace != "sb" || d.Spec.Template.Spec.Containers[0].Image != "reg.example/sandbox:v2" ||
		env["SANDBOX_EGRESS_DENY"] != "203.0.113.9" || env["SANDBOX_EGRESS_PERMIT"] != "198.51.100.0/24" {
		t.Errorf("gateway deployment %s/%s env %v", d.Namespace, d.Spec.Template.Spec.Containers[0].Image, env)
	}
	if got := m["NetworkPolicy/sandbox-egress"].(*networkingv1.NetworkPolicy).Spec.Egress[0].To[0].IPBlock.CIDR; got != "192.0.2.10/32" {
		t.Errorf("gateway API server rule %s", got)
	}
	if got := deploymentEnv(t, m)["SANDBOX_TOOL_DEFAULT_EGRESS"]; got != "none" {
		t.Errorf("SANDBOX_TOOL_DEFAULT_EGRESS %q", got)
	}
	if _, err := Objects(Options{ToolDefaultEgress: "some"}); err == nil {
		t.Error("a default egress of some was accepted")
	}
}
