//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/sandboxd/sandbox/e2e/kindenv"
)

// egressCostScript, run by a tool through builtins:exec: n HTTPS GETs of
// the allowed stand-in, each on a new connection (through HTTPS_PROXY when
// the pod has one), then one download of size bytes; it prints the
// latencies and the throughput as JSON. The stand-in's certificate is
// self-signed: the path is measured, not the PKI.
const egressCostScript = `
import json, os, ssl, time, urllib.request
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
proxy = os.environ.get("HTTPS_PROXY")
op = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ctx), urllib.request.ProxyHandler({"https": proxy} if proxy else {}))
lat = []
for _ in range(N):
    t = time.monotonic(); op.open("https://allowed.test/", timeout=10).read(); lat.append((time.monotonic() - t) * 1000)
t = time.monotonic(); r = op.open("https://allowed.test/size/%d" % SIZE, timeout=60); got = 0
while True:
    b = r.read(1 << 16)
    if not b: break
    got += len(b)
d = time.monotonic() - t
print(json.dumps({"proxy": proxy or "", "ms": sorted(lat), "bytes": got, "mb_s": got / d / 1e6}))
`

// TestEgressCost: a tool's HTTPS GET to the allowed stand-in through the
// gateway (the egress image) against the same GET directly (the agent
// image, on internet egress), p50 and p90, and one 64 MiB download through
// the gateway. It measures; it fails only when a call does.
func TestEgressCost(t *testing.T) {
	const n, size = 30, 64 << 20
	f := features.New("the cost of egress by name").
		WithLabel("needs", "service").
		Setup(withService).
		Assess("GET p50/p90 through the gateway and direct; one download", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			if err := waitGateway(ctx, t); err != nil {
				t.Fatal(err)
			}
			code := "N = 30\nSIZE = 67108864\n" + egressCostScript
			for _, image := range []string{kindenv.EgressImage, kindenv.AgentImage} {
				req := map[string]any{"image": image, "function": "builtins:exec", "args": []any{code, map[string]string{"__name__": "__main__"}}, "timeout_s": 60}
				r, err := postCall(ctx, service(ctx), req)
				if err != nil {
					t.Fatal(err)
				}
				if r.status != http.StatusOK || r.res.Error != nil || r.res.ExitCode != 0 {
					t.Fatalf("%s: %s; stderr %q", image, r, r.res.Stderr)
				}
				var m struct {
					Proxy string    `json:"proxy"`
					MS    []float64 `json:"ms"`
					Bytes int64     `json:"bytes"`
					MBs   float64   `json:"mb_s"`
				}
				if err := json.Unmarshal([]byte(r.res.Stdout), &m); err != nil || len(m.MS) != n || m.Bytes != size {
					t.Fatalf("%s: %v: %q", image, err, r.res.Stdout)
				}
				t.Logf("egress cost, %s (proxy %q): HTTPS GET on a new connection p50 %.1f ms p90 %.1f ms over %d; one %d MiB download %.0f MB/s",
					image, m.Proxy, m.MS[n/2], m.MS[n*9/10], n, size>>20, m.MBs)
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, f)
}

// TestEgressGatewayDown: with no gateway replica, a call whose image has
// names is a fast 503 that names the gateway, no tool pod is left, and
// snippets run as before; the gateway back, the same call runs.
func TestEgressGatewayDown(t *testing.T) {
	f := features.New("a call that needs the gateway fails fast while it is down").
		WithLabel("needs", "service").
		Setup(withService).
		Assess("503 naming the gateway, snippets untouched, calls again once it is back", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			restore := scaleGateway(ctx, t, 0)
			defer restore()
			req := map[string]any{"image": kindenv.EgressImage, "function": "builtins:len", "args": []any{"abc"}, "timeout_s": 10}
			r, err := postCall(ctx, service(ctx), req)
			if err != nil {
				t.Fatal(err)
			}
			if r.status != http.StatusServiceUnavailable || !strings.Contains(r.errMsg, "gateway") || r.elapsed > 5*time.Second {
				t.Errorf("gateway down: %s; want a 503 naming the gateway within 5 s", r)
			}
			t.Logf("gateway down: %s", r)
			if res := execute(ctx, t, service(ctx), "print(6*7)", 10); res.Stdout != "42\n" {
				t.Errorf("a snippet while the gateway is down: %+v", res)
			}
			assertNoToolPods(ctx, t)
			restore()
			if r, err = postCall(ctx, service(ctx), req); err != nil || r.status != http.StatusOK || r.res.Error != nil {
				t.Errorf("the gateway back: %s, %v", r, err)
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, f)
}

// scaleGateway sets the gateway's replicas to n and waits until no endpoint
// of it is ready (n 0) or all are; its undo (idempotent) puts them back.
func scaleGateway(ctx context.Context, t *testing.T, n int32) func() {
	t.Helper()
	deps := clientset(ctx, t).AppsV1().Deployments(kindenv.Namespace)
	d, err := deps.Get(ctx, egressGateway, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	was := *d.Spec.Replicas
	set := func(n int32) error {
		s, err := deps.GetScale(ctx, egressGateway, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Replicas = n
		if _, err := deps.UpdateScale(ctx, egressGateway, s, metav1.UpdateOptions{}); err != nil {
			return err
		}
		return wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			d, err := deps.Get(ctx, egressGateway, metav1.GetOptions{})
			if err != nil {
				return false, nil //nolint:nilerr // retry until the deadline
			}
			return d.Status.ObservedGeneration >= d.Generation && d.Status.Replicas == n && d.Status.ReadyReplicas == n, nil
		})
	}
	if err := set(n); err != nil {
		t.Fatalf("scale the gateway to %d: %v", n, err)
	}
	done := false
	return func() {
		if done {
			return
		}
		done = true
		if err := set(was); err != nil {
			t.Errorf("scale the gateway back to %d: %v", was, err)
		}
	}
}
