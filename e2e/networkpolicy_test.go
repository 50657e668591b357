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
	targets          []target
	createdNS        bool // we created namespace sandbox (no manifests deployed)
	ownPolicy        bool // we created the DNS-only policy
}

type target struct{ name, url string }

func TestNetworkPolicy(t *testing.T) {
	f := features.New("NetworkPolicy: a snippet pod cannot reach what an unrestricted pod can").
		WithLabel("needs", "cluster").
		Setup(setupNetpol).
		Assess("the unrestricted control pod reaches every target", assessControl).
		Assess("the snippet pod is blocked from every target", assessSnippet).
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
	canary := createReady(ctx, t, cfg, canaryPod(other.Name, "canary", image))
	st.control = createReady(ctx, t, cfg, sleeperPod(other.Name, "control", image, nil))
	st.snippet = createReady(ctx, t, cfg, sleeperPod(kindenv.Namespace, envconf.RandomName("e2e-snippet", 20), image, snippetLabels))

	sb := Suite(ctx).Standins
	st.targets = []target{
		{"in-cluster canary pod", fmt.Sprintf("http://%s:%d/", canary.Status.PodIP, canaryPort)},
		{"internet stand-in", sb.Internet.URL()},
		{"metadata stand-in", sb.Metadata.URL()},
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
