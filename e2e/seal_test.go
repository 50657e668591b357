//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/sandboxd/sandbox/e2e/kindenv"
	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/verify"
)

// exfilLookupMax is how quickly a sealed pod's lookup must fail: the answer
// comes from its own runner.
const exfilLookupMax = 100 * time.Millisecond

// canaryWait is how long a name the cluster DNS forwarded may take to show
// in the canary's log.
const canaryWait = 10 * time.Second

func randomToken(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "tok" + hex.EncodeToString(b)
}

// lookup is what lookupCode prints: the pod's resolvers, its lookup of a
// name through them, and a query sent straight to the cluster DNS.
type lookup struct {
	Resolvers []string `json:"resolvers"`
	Addrs     []string `json:"addrs"`
	Error     string   `json:"error"`
	MS        float64  `json:"ms"`
	Direct    string   `json:"direct"`
}

// lookupCode looks name up with getaddrinfo (as any program would) and, when
// dnsIP is set, asks that resolver for direct over UDP itself.
func lookupCode(name, dnsIP, direct string) string {
	return fmt.Sprintf(`import json, socket, struct, time
out = {}
t0 = time.monotonic()
try:
    out["addrs"] = sorted({i[4][0] for i in socket.getaddrinfo(%q, None, 0, socket.SOCK_STREAM)})
except Exception as e:
    out["error"] = "%%s: %%s" %% (type(e).__name__, e)
out["ms"] = (time.monotonic() - t0) * 1000
out["resolvers"] = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")]
if %q:
    q = struct.pack(">HHHHHH", 4242, 0x0100, 1, 0, 0, 0) + b"".join(bytes([len(p)]) + p.encode() for p in %q.split(".")) + b"\x00\x00\x01\x00\x01"
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    try:
        s.connect((%q, 53))
        s.send(q)
        out["direct"] = "answered %%d bytes" %% len(s.recv(512))
    except Exception as e:
        out["direct"] = "no answer: %%s: %%s" %% (type(e).__name__, e)
print(json.dumps(out))
`, name, dnsIP, direct, dnsIP)
}

func parseLookup(t *testing.T, stdout string) lookup {
	t.Helper()
	var l lookup
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &l); err != nil {
		t.Fatalf("lookup printed %q: %v", stdout, err)
	}
	return l
}

// clusterDNSIP is the kube-dns Service's address.
func clusterDNSIP(ctx context.Context, t *testing.T) string {
	t.Helper()
	svc, err := clientset(ctx, t).CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("kube-dns Service: %v", err)
	}
	return svc.Spec.ClusterIP
}

// canarySaw reports whether the DNS canary was asked a name containing
// token, waiting up to wait for it.
func canarySaw(ctx context.Context, t *testing.T, token string, wait time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		names, err := kindenv.DNSCanaryQueries(ctx)
		if err != nil {
			t.Fatalf("read the DNS canary's log: %v", err)
		}
		if slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, token) }) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// controlLookup runs lookupCode in an unrestricted pod of a namespace of its
// own: the positive control, showing that a lookup of the canary zone does
// leave the cluster from a pod that is not sealed.
func controlLookup(ctx context.Context, t *testing.T, cfg *envconf.Config, name string) lookup {
	t.Helper()
	r := cfg.Client().Resources()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: envconf.RandomName("e2e-dns-control", 24)}}
	if err := r.Create(ctx, ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() { _ = r.Delete(context.WithoutCancel(ctx), ns) })
	pod := createReady(ctx, t, cfg, sleeperPod(ns.Name, "control", Suite(ctx).Image, nil))
	var stdout, stderr bytes.Buffer
	if err := r.ExecInPod(ctx, ns.Name, pod.Name, "main", []string{"python3", "-c", lookupCode(name, "", "")}, &stdout, &stderr); err != nil {
		t.Fatalf("control lookup: %v: %s", err, stderr.String())
	}
	return parseLookup(t, stdout.String())
}

// TestSealedDNS: in the default sealed mode a snippet's lookup of a fresh
// name in the canary zone fails inside the pod in under 100 ms, its only
// resolver is its own loopback, a query it sends the cluster DNS itself
// gets no answer, and the canary never hears either name; the positive
// control, the same lookup from an unrestricted pod, reaches the canary.
// verify reports network/dns-exfiltration PASS and no DNS caveat.
func TestSealedDNS(t *testing.T) {
	f := features.New("sealed DNS: no lookup leaves a snippet pod").
		WithLabel("needs", "service").
		Setup(withService).
		Assess("the lookup fails inside the pod and the canary hears nothing", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			tok, direct := randomToken(t), randomToken(t)
			name := tok + "." + kindenv.DNSCanaryZone
			res := execute(ctx, t, service(ctx), lookupCode(name, clusterDNSIP(ctx, t), direct+"."+kindenv.DNSCanaryZone), 20)
			l := parseLookup(t, res.Stdout)
			t.Logf("sandbox %s: %+v", res.SandboxID, l)
			if len(l.Addrs) > 0 {
				t.Errorf("the sandbox resolved %s to %v", name, l.Addrs)
			}
			if !slices.Equal(l.Resolvers, []string{"127.0.0.1"}) {
				t.Errorf("the sandbox's resolvers are %v, want only its own 127.0.0.1", l.Resolvers)
			}
			if time.Duration(l.MS*float64(time.Millisecond)) >= exfilLookupMax {
				t.Errorf("the lookup failed after %.1f ms, want under %s", l.MS, exfilLookupMax)
			}
			if !strings.HasPrefix(l.Direct, "no answer") {
				t.Errorf("a query straight to the cluster DNS: %s", l.Direct)
			}
			for _, tk := range []string{tok, direct} {
				if canarySaw(ctx, t, tk, canaryWait) {
					t.Errorf("the canary was asked a name with %s: it left the cluster", tk)
				}
			}
			// The positive control: the same kind of lookup from a pod that
			// is not sealed reaches the canary, so its silence above counts.
			ctok := randomToken(t)
			c := controlLookup(ctx, t, cfg, ctok+"."+kindenv.DNSCanaryZone)
			if !slices.Contains(c.Addrs, kindenv.DNSCanaryIP) || !canarySaw(ctx, t, ctok, canaryWait) {
				t.Errorf("control: %+v, canary saw it: %v; the canary zone is not reachable, so the sandbox's silence proves nothing", c, canarySaw(ctx, t, ctok, 0))
			}
			return ctx
		}).
		Assess("verify reports network/dns-exfiltration PASS and no DNS caveat", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			rep := runVerify(ctx, t, "--only", "network")
			expect(t, rep, verify.Pass, "network/dns-exfiltration", "network/dns-cluster-udp", "network/dns-cluster-tcp")
			for _, c := range rep.Caveats {
				if strings.Contains(c, "DNS is an exfiltration channel") {
					t.Errorf("sealed, and still the caveat: %s", c)
				}
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, f)
}

// TestClusterDNSMode: serve redeployed with --snippet-dns cluster (the
// seeds' behaviour): a snippet's lookup of a fresh canary name resolves to
// the canary's answer and the canary logs the token, so the channel is open;
// verify reports dns-exfiltration SKIP and the caveat with that evidence.
func TestClusterDNSMode(t *testing.T) {
	f := features.New("cluster DNS mode: the channel is open, and verify says so").
		WithLabel("needs", "service").
		Setup(func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			if err := ServiceErr(ctx); err != nil {
				t.Fatal(err)
			}
			ctx = context.WithValue(ctx, restoreKey{}, weaken(ctx, t, serveChange{args: []string{"--snippet-dns=cluster"}}))
			return withService(ctx, t, cfg)
		}).
		Assess("the canary logs the snippet's token", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			tok := randomToken(t)
			res := execute(ctx, t, service(ctx), lookupCode(tok+"."+kindenv.DNSCanaryZone, "", ""), 20)
			l := parseLookup(t, res.Stdout)
			t.Logf("sandbox %s: %+v", res.SandboxID, l)
			if !slices.Contains(l.Addrs, kindenv.DNSCanaryIP) {
				t.Errorf("cluster mode: the lookup got %v (%s), want the canary's %s", l.Addrs, l.Error, kindenv.DNSCanaryIP)
			}
			if !canarySaw(ctx, t, tok, canaryWait) {
				t.Errorf("cluster mode: the canary never heard %s", tok)
			}
			return ctx
		}).
		Assess("verify: dns-exfiltration SKIP, the caveat with the evidence", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			rep := runVerify(ctx, t, "--only", "network")
			expect(t, rep, verify.Skip, "network/dns-exfiltration")
			expect(t, rep, verify.Pass, "network/dns-cluster-udp", "network/dns-cluster-tcp")
			found := false
			for _, c := range rep.Caveats {
				found = found || (strings.Contains(c, "DNS is an exfiltration channel") && strings.Contains(c, kindenv.DNSCanaryZone) &&
					strings.Contains(c, kindenv.DNSCanaryIP))
			}
			if !found {
				t.Errorf("no DNS caveat naming the canary zone's answer: %q", rep.Caveats)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			if restore, ok := ctx.Value(restoreKey{}).(func()); ok {
				restore()
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, f)
}

// unsealedNotice is what serve answers while its pods cannot prove their
// network sealed.
var unsealedNotice = api.NotSealed
