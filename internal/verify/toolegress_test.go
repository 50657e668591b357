package verify

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/sandboxd/sandbox/internal/egress"
)

// What the control and a tool pod see on a deployment that holds, and what
// each weakening changes; the judges must turn each into its check's FAIL.
const (
	egressCtlOK = `{"probe":"egress","mode":"control","allowed":{"ok":true,"status":200,"token":true},"other":{"ok":true,"status":200,"token":true},
"lookup_allowed":{"addrs":["198.51.100.20"]},"rebind":{"rebind.test:443":{"addrs":["10.0.0.9"]},"meta.test:443":{"addrs":["169.254.169.254"]}},
"direct_addr":"198.51.100.20:443","direct":{"ok":true},"dns":{"answered":true,"bytes":60}}`
	egressToolOK = `{"probe":"egress","mode":"tool","proxy":"http://10.96.7.7:3128","allowed":{"ok":true,"status":200,"token":true},
"other":{"ok":false,"error":"URLError: <urlopen error Tunnel connection failed: 403 Forbidden>"},
"rebind":{"rebind.test:443":{"ok":false,"error":"URLError: Tunnel connection failed: 403 Forbidden"},"meta.test:443":{"ok":false,"error":"URLError: Tunnel connection failed: 403 Forbidden"}},
"sni_same":{"connect":"HTTP/1.1 200 Connection established","handshake":true,"token":true},"sni_other":{"connect":"HTTP/1.1 200 Connection established","error":"SSLEOFError: EOF"},
"lookup_allowed":{"error":"gaierror: [Errno -2] Name or service not known"},"direct":{"ok":false,"error":"TimeoutError: timed out"},"dns":{"answered":false,"error":"TimeoutError: timed out"}}`
)

func egressRunOf(tool string) egressRun {
	allow, _ := egress.Parse("allowed.test,rebind.test,meta.test")
	return egressRun{allow: allow, allowed: DefaultEgressAllowed, other: DefaultEgressOther, rebind: DefaultEgressRebind,
		ctl: gjson.Parse(egressCtlOK), tool: gjson.Parse(tool)}
}

func statuses(rs []Result) map[string]Status {
	m := map[string]Status{}
	for _, r := range rs {
		m[r.Name] = r.Status
	}
	return m
}

func TestJudgeEgress(t *testing.T) {
	got := statuses(judgeEgress(egressRunOf(egressToolOK)))
	for _, c := range egressChecks {
		if got[c] != Pass {
			t.Errorf("holding deployment: %s %s, want PASS", c, got[c])
		}
	}
	for _, tt := range []struct {
		weakening, check, path, value string
	}{
		{"egress-refuse-all", "toolcalls/egress-by-name", "allowed", `{"ok":false,"error":"Tunnel connection failed: 403 Forbidden"}`},
		{"egress-allow-all", "toolcalls/name-not-allowed", "other", `{"ok":true,"status":200,"token":true}`},
		{"egress-direct", "toolcalls/no-direct-egress", "direct", `{"ok":true}`},
		{"egress-rebind", "toolcalls/rebinding-refused", `rebind.rebind\.test:443`, `{"ok":false,"error":"Tunnel connection failed: 502 Bad Gateway"}`},
		{"egress-rebind (dropped dial)", "toolcalls/rebinding-refused", `rebind.meta\.test:443`, `{"ok":false,"error":"URLError: <urlopen error timed out>"}`},
		{"egress-no-sni", "toolcalls/sni-mismatch-refused", "sni_other", `{"connect":"HTTP/1.1 200 Connection established","handshake":true,"token":true}`},
		{"egress-cluster-dns", "toolcalls/no-own-dns", "lookup_allowed", `{"addrs":["198.51.100.20"]}`},
	} {
		tool := setRaw(t, egressToolOK, tt.path, tt.value)
		got := statuses(judgeEgress(egressRunOf(tool)))
		if got[tt.check] != Fail {
			t.Errorf("%s: %s %s, want FAIL", tt.weakening, tt.check, got[tt.check])
		}
	}
	// Without its control, a refusal is INCONCLUSIVE, never PASS (reaching
	// the allowed name proves itself; the hello's control is the tool's own
	// matching tunnel).
	r := egressRunOf(egressToolOK)
	r.ctl = gjson.Parse(`{}`)
	for c, st := range statuses(judgeEgress(r)) {
		if st == Pass && c != "toolcalls/sni-mismatch-refused" && c != "toolcalls/egress-by-name" {
			t.Errorf("no control: %s PASS", c)
		}
	}
	r = egressRunOf(egressToolOK)
	r.toolErr = errors.New("503 the gateway is not available")
	for c, st := range statuses(judgeEgress(r)) {
		if st != Inconclusive {
			t.Errorf("no tool answer: %s %s", c, st)
		}
	}
}

// setRaw replaces the value at path in a JSON document (gjson syntax).
func setRaw(t *testing.T, doc, path, raw string) string {
	t.Helper()
	v := gjson.Get(doc, path)
	if !v.Exists() {
		t.Fatalf("no %s in the document", path)
	}
	return doc[:v.Index] + raw + doc[v.Index+len(v.Raw):]
}

func TestEgressImageOf(t *testing.T) {
	dep := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Env: []corev1.EnvVar{{Name: "SANDBOX_TOOL_IMAGES", Value: "agent:dev;reg.example/web/=a.example;agent:web=allowed.test,rebind.test"}}}}}}}}
	image, allow := egressImageOf(dep)
	if image != "agent:web" || allow.String() != "allowed.test,rebind.test" {
		t.Errorf("egressImageOf = %s %s", image, allow)
	}
	if got := toolImageOf(dep); got != "agent:dev" {
		t.Errorf("toolImageOf = %s", got)
	}
}

func TestInternetCaveat(t *testing.T) {
	dep := func(images, def string) *appsv1.Deployment {
		return &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Env: []corev1.EnvVar{{Name: "SANDBOX_TOOL_IMAGES", Value: images}, {Name: "SANDBOX_TOOL_DEFAULT_EGRESS", Value: def}}}}}}}}
	}
	c := internetCaveat(dep("agent:dev;agent:web=a.example;agent:net=internet;agent:calc=none", "internet"))
	for _, want := range []string{"agent:dev (no egress given, default internet)", "agent:net (given internet)"} {
		if !strings.Contains(c, want) {
			t.Errorf("caveat %q lacks %q", c, want)
		}
	}
	if strings.Contains(c, "agent:web (") || strings.Contains(c, "agent:calc (") {
		t.Errorf("caveat names an image not on internet: %q", c)
	}
	if c := internetCaveat(dep("agent:dev;agent:web=a.example", "none")); c != "" {
		t.Errorf("nothing on internet, caveat %q", c)
	}
}
