//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/sandboxd/sandbox/e2e/kindenv"
)

// snippetLabels are the labels the pool puts on snippet pods (package
// kube's constants); the manifests' NetworkPolicies select them.
var snippetLabels = map[string]string{
	"app.kubernetes.io/name": "sandbox-runner",
	"sandbox.dev/kind":       "snippet",
	"sandbox.dev/owner":      "e2e-networkpolicy",
}

// Policy timing: kube-router applies a policy about a second after a pod
// starts, and a pod that connects earlier may get through, so "blocked" is
// polled for, and must hold for several probes in a row.
const (
	policyDeadline  = 45 * time.Second
	blockedInARow   = 3
	probeInterval   = time.Second
	ownPolicyName   = "e2e-snippet-dns-only"
	canaryNamespace = "e2e-netpol"
)

type npKey string

// npState is what Setup made, for the assessments and Teardown.
type npState struct {
	control, snippet *corev1.Pod
	// canary is the in-cluster target; denied a pod beside the control
	// that the canary's ingress policy does not admit.
	canary, denied *corev1.Pod
	targets        []target
	createdNS      bool // we created namespace sandbox (no manifests deployed)
	ownPolicy      bool // we created the DNS-only policy
}

type target struct{ name, url string }

func TestNetworkPolicy(t *testing.T) {
	f := features.New("NetworkPolicy: a snippet pod cannot reach what an unrestricted pod can").
		WithLabel("needs", "cluster").
		Setup(setupNetpol).
		Assess("the unrestricted control pod reaches every target", assessControl).
		Assess("the snippet pod is blocked from every target", assessSnippet).
		Assess("ingress by pod address: the canary admits the control and refuses its neighbour", assessIngress).
		Teardown(teardownNetpol).
		Feature()
	testenv.Test(t, f)
}

func state(ctx context.Context) *npState { return ctx.Value(npKey("state")).(*npState) }

func setupNetpol(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
	r := cfg.Client().Resources()
	image := Suite(ctx).Image
	st := &npState{}
	ctx = context.WithValue(ctx, npKey("state"), st)

	// Namespace sandbox comes from the manifests; without them, make one
	// like it so the test still checks the policy engine.
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, kindenv.Namespace, "", ns); apierrors.IsNotFound(err) {
		ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kindenv.Namespace, Labels: map[string]string{
			"pod-security.kubernetes.io/enforce": "restricted",
		}}}
		if err := r.Create(ctx, ns); err != nil {
			t.Fatalf("create namespace %s: %v", kindenv.Namespace, err)
		}
		st.createdNS = true
		t.Logf("namespace %s did not exist (manifests not deployed): created it", kindenv.Namespace)
	} else if err != nil {
		t.Fatalf("get namespace %s: %v", kindenv.Namespace, err)
	}

	policies := &networkingv1.NetworkPolicyList{}
	if err := r.WithNamespace(kindenv.Namespace).List(ctx, policies); err != nil {
		t.Fatalf("list NetworkPolicies: %v", err)
	}
	var selecting []string
	for _, p := range policies.Items {
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		if err == nil && sel.Matches(labels.Set(snippetLabels)) && hasEgress(p) {
			selecting = append(selecting, p.Name)
		}
	}
	if len(selecting) > 0 {
		t.Logf("egress policies from the manifests select snippet pods: %v", selecting)
	} else {
		t.Logf("no deployed egress policy selects snippet pods: creating the DNS-only policy %s", ownPolicyName)
		if err := r.Create(ctx, dnsOnlyPolicy()); err != nil {
			t.Fatalf("create policy: %v", err)
		}
		st.ownPolicy = true
	}

	other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: envconf.RandomName(canaryNamespace, 16)}}
	if err := r.Create(ctx, other); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	// On two workers or more, the canary runs on one and the probing pods
	// on another: every probe crosses nodes, where a policy by pod address
	// holds only if the source address survives the trip.
	canaryNode, probeNode := "", ""
	if ws := schedulableWorkers(ctx, t, clientset(ctx, t)); len(ws) >= 2 {
		canaryNode, probeNode = ws[1], ws[0]
		t.Logf("the canary on %s, the probing pods on %s", canaryNode, probeNode)
	}
	st.canary = createReady(ctx, t, cfg, onNodeNamed(canaryPod(other.Name, "canary", image), canaryNode))
	st.control = createReady(ctx, t, cfg, onNodeNamed(sleeperPod(other.Name, "control", image, admitted), probeNode))
	st.denied = createReady(ctx, t, cfg, onNodeNamed(sleeperPod(other.Name, "denied", image, nil), probeNode))
	// The snippet pod is admitted too: what blocks it must be its own
	// egress policy, not the canary's ingress one.
	snippet := map[string]string{}
	for k, v := range snippetLabels {
		snippet[k] = v
	}
	for k, v := range admitted {
		snippet[k] = v
	}
	st.snippet = createReady(ctx, t, cfg, onNodeNamed(sleeperPod(kindenv.Namespace, envconf.RandomName("e2e-snippet", 20), image, snippet), probeNode))
	if err := r.Create(ctx, canaryIngressPolicy(other.Name)); err != nil {
		t.Fatalf("create the canary's ingress policy: %v", err)
	}
	canary := st.canary

	sb := Suite(ctx).Standins
	st.targets = []target{
		{"in-cluster canary pod", fmt.Sprintf("http://%s:%d/", canary.Status.PodIP, canaryPort)},
		{"internet stand-in", sb.Internet.URL()},
		{"metadata stand-in", sb.Metadata.URL()},
	}
	return ctx
}

// admitted is the label of the pods the canary's ingress policy admits.
var admitted = map[string]string{"e2e-netpol/admitted": "true"}

// canaryIngressPolicy admits to the canary only the pods labelled admitted,
// of any namespace: the engine on the canary's node tells them from their
// neighbours by their addresses.
func canaryIngressPolicy(ns string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "canary-ingress", Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "canary"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{},
					PodSelector: &metav1.LabelSelector{MatchLabels: admitted}}},
			}},
		},
	}
}

// onNodeNamed pins pod to node; "" leaves it to the scheduler.
func onNodeNamed(pod *corev1.Pod, node string) *corev1.Pod {
	if node != "" {
		pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	}
	return pod
}

// assessIngress: the canary's ingress policy refuses the pod beside the
// control (blocked for several probes in a row), while the control, in
// the same window, still reaches it.
func assessIngress(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
	st, r := state(ctx), cfg.Client().Resources()
	url := fmt.Sprintf("http://%s:%d/", st.canary.Status.PodIP, canaryPort)
	var last probe
	inARow := 0
	deadline := time.Now().Add(policyDeadline)
	for inARow < blockedInARow && !time.Now().After(deadline) && ctx.Err() == nil {
		last = fetchFrom(ctx, r, st.denied, url)
		if last.reached {
			inARow = 0
		} else {
			inARow++
		}
		time.Sleep(probeInterval)
	}
	if inARow < blockedInARow {
		t.Errorf("the canary's ingress policy did not refuse %s (%s, on %s) within %s: last probe %s",
			st.denied.Name, st.denied.Status.PodIP, st.denied.Spec.NodeName, policyDeadline, last)
	} else {
		t.Logf("%s (on %s) -> canary (on %s): %s", st.denied.Name, st.denied.Spec.NodeName, st.canary.Spec.NodeName, last)
	}
	if c := fetchFrom(ctx, r, st.control, url); !c.reached {
		t.Errorf("the admitted control (%s, on %s) cannot reach the canary (on %s): %s; a masqueraded source would look so",
			st.control.Status.PodIP, st.control.Spec.NodeName, st.canary.Spec.NodeName, c)
	} else {
		t.Logf("control (on %s) -> canary (on %s): %s", st.control.Spec.NodeName, st.canary.Spec.NodeName, c)
	}
	return ctx
}

func hasEgress(p networkingv1.NetworkPolicy) bool {
	for _, ty := range p.Spec.PolicyTypes {
		if ty == networkingv1.PolicyTypeEgress {
			return true
		}
	}
	return len(p.Spec.Egress) > 0
}

// dnsOnlyPolicy is what the manifests' policies amount to for snippet pods
// in DNS cluster mode, the more open one: egress to port 53 only.
func dnsOnlyPolicy() *networkingv1.NetworkPolicy {
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	dns := intstrPort(53)
	sel := map[string]string{}
	for k, v := range snippetLabels {
		if k != "sandbox.dev/owner" {
			sel[k] = v
		}
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: ownPolicyName, Namespace: kindenv.Namespace},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: sel},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
			}},
		},
	}
}

func assessControl(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
	st, r := state(ctx), cfg.Client().Resources()
	for _, tg := range st.targets {
		var last probe
		deadline := time.Now().Add(policyDeadline)
		for {
			last = fetchFrom(ctx, r, st.control, tg.url)
			if last.reached || time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			time.Sleep(probeInterval)
		}
		if !last.reached {
			t.Errorf("control could not reach the %s (%s): %s; a block elsewhere would prove nothing", tg.name, tg.url, last)
			continue
		}
		t.Logf("control -> %s (%s): %s", tg.name, tg.url, last)
	}
	return ctx
}

func assessSnippet(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
	st, r := state(ctx), cfg.Client().Resources()
	for _, tg := range st.targets {
		var last probe
		inARow := 0
		deadline := time.Now().Add(policyDeadline)
		for inARow < blockedInARow && !time.Now().After(deadline) && ctx.Err() == nil {
			last = fetchFrom(ctx, r, st.snippet, tg.url)
			if last.reached {
				inARow = 0
			} else {
				inARow++
			}
			time.Sleep(probeInterval)
		}
		if inARow < blockedInARow {
			t.Errorf("snippet pod was not blocked from the %s (%s) within %s: last probe %s", tg.name, tg.url, policyDeadline, last)
			continue
		}
		// The same target, in the same window, from the control: the canary
		// is still up, so the block is the policy's doing.
		if c := fetchFrom(ctx, r, st.control, tg.url); !c.reached {
			t.Errorf("control lost the %s after the snippet's probes: %s", tg.name, c)
			continue
		}
		t.Logf("snippet -> %s (%s): %s", tg.name, tg.url, last)
	}
	return ctx
}

func teardownNetpol(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
	st, r := state(ctx), cfg.Client().Resources()
	// Teardown runs even when the test failed; its context may be spent.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	del := func(what string, obj interface{ GetName() string }, err error) {
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete %s %s: %v", what, obj.GetName(), err)
		}
	}
	if st.snippet != nil {
		del("pod", st.snippet, r.Delete(ctx, st.snippet))
	}
	if st.control != nil {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: st.control.Namespace}}
		del("namespace", ns, r.Delete(ctx, ns))
	}
	if st.ownPolicy {
		p := dnsOnlyPolicy()
		del("policy", p, r.Delete(ctx, p))
	}
	if st.createdNS {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kindenv.Namespace}}
		del("namespace", ns, r.Delete(ctx, ns))
	}
	return ctx
}
