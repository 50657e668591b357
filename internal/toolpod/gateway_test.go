package toolpod

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/egress"
	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/wire"
)

// A call's pod gets its image's egress: none, or the gateway with the
// image's names and the Service's address; while the gateway has no ready
// pod, a call that needs it is a fast 503 that says so, and no pod is made.
func TestCallEgressByImage(t *testing.T) {
	e := newEnv(t, ready, answer(wire.CallResult{Result: json.RawMessage(`1`)}), 5*time.Second)
	ims, err := egress.ParseImages([]string{"agent:web=api.example.com,*.example.org;agent:calc=none;agent:net"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g := NewGateway(e.cs, testNS, DefaultGatewayService, DefaultGatewayPort)
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	e.caller.opts.Images, e.caller.opts.Gateway = ims, g

	call := func(image string) (*corev1.Pod, error) {
		t.Helper()
		e.created.Store((*corev1.Pod)(nil))
		c := testCall(t, image)
		c.RequestID = "req-" + image
		_, err := e.caller.Call(context.Background(), c)
		p, _ := e.created.Load().(*corev1.Pod)
		return p, err
	}

	// No Service yet: refused at once, nothing made.
	waitFor(t, func() bool { _, err := g.Proxy(); return err != nil && strings.Contains(err.Error(), "missing") })
	began := time.Now()
	p, err := call("agent:web")
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || !strings.Contains(ae.Msg, "egress gateway") || p != nil {
		t.Fatalf("gateway missing: pod %v, err %v; want a 503 naming the gateway and no pod", p != nil, err)
	}
	if time.Since(began) > time.Second {
		t.Errorf("the refusal took %s", time.Since(began))
	}

	// The Service, but no ready pod behind it.
	_, err = e.cs.CoreV1().Services(testNS).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: DefaultGatewayService},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.7.7"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	no := false
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "gw-1", Labels: map[string]string{discoveryv1.LabelServiceName: DefaultGatewayService}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.9"}, Conditions: discoveryv1.EndpointConditions{Ready: &no}}}}
	if _, err := e.cs.DiscoveryV1().EndpointSlices(testNS).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, err := g.Proxy(); return err != nil && strings.Contains(err.Error(), "no ready pod") })
	if p, err := call("agent:web"); !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || p != nil {
		t.Fatalf("gateway not ready: pod %v, err %v", p != nil, err)
	}

	yes := true
	slice.Endpoints[0].Conditions.Ready = &yes
	if _, err := e.cs.DiscoveryV1().EndpointSlices(testNS).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, err := g.Proxy(); return err == nil })
	p, err = call("agent:web")
	if err != nil || p == nil {
		t.Fatalf("gateway ready: %v", err)
	}
	env := map[string]string{}
	for _, v := range p.Spec.Containers[0].Env {
		env[v.Name] = v.Value
	}
	if p.Labels[kube.LabelEgress] != kube.EgressGateway || p.Annotations[kube.AnnotationEgressAllow] != "api.example.com,*.example.org" ||
		p.Annotations[kube.AnnotationRequestID] != "req-agent:web" || env["HTTPS_PROXY"] != "http://10.96.7.7:3128" || p.Spec.DNSPolicy != corev1.DNSNone {
		t.Errorf("gateway pod: labels %v annotations %v env %v dns %q", p.Labels, p.Annotations, env, p.Spec.DNSPolicy)
	}

	// A caller's policy entry narrows the image's egress, never widens it.
	narrowed := func(image, narrow string) (*corev1.Pod, error) {
		t.Helper()
		e.created.Store((*corev1.Pod)(nil))
		c := testCall(t, image)
		c.Egress = narrow
		_, err := e.caller.Call(context.Background(), c)
		p, _ := e.created.Load().(*corev1.Pod)
		return p, err
	}
	if p, err := narrowed("agent:web", "api.example.com"); err != nil || p.Annotations[kube.AnnotationEgressAllow] != "api.example.com" {
		t.Errorf("narrowed to one name: %v %v", err, p)
	}
	if p, err := narrowed("agent:net", "none"); err != nil || p.Labels[kube.LabelEgress] != kube.EgressNone {
		t.Errorf("internet narrowed to none: %v %v", err, p)
	}
	for _, tt := range []struct{ image, narrow string }{{"agent:web", "other.example"}, {"agent:calc", "api.example.com"}, {"agent:web", "internet"}} {
		if p, err := narrowed(tt.image, tt.narrow); !errors.As(err, &ae) || ae.Status != http.StatusForbidden || p != nil {
			t.Errorf("%s widened to %s: pod %v, err %v", tt.image, tt.narrow, p != nil, err)
		}
	}

	for image, want := range map[string]string{"agent:calc": kube.EgressNone, "agent:net": kube.EgressInternet} {
		p, err := call(image)
		if err != nil || p == nil || p.Labels[kube.LabelEgress] != want {
			t.Errorf("%s: err %v, label %v; want %s", image, err, p.Labels, want)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met in 5s")
}
