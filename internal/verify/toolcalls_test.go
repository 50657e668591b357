package verify

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tidwall/gjson"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/sandboxd/sandbox/internal/verify/netsec"
	"github.com/sandboxd/sandbox/wire"
)

const goodToolEnv = `{"probe":"toolenv","hostname":"sandbox-tool-abcde","uid":2000123,"euid":2000123,"gid":2000123,"egid":2000123,
"groups":[2000123],"env_names":["HOME","PATH","VERIFY_ENV_CANARY"],"canary":"tok","token_paths":[],"token_mounts":[],
"marker":{"path":"/tmp/verify-m","written":true}}`

func TestJudgeToolCredentials(t *testing.T) {
	serve := []string{"SANDBOX_IMAGE", "POD_NAME"}
	cases := []struct {
		name string
		js   string
		perr error
		want Status
	}{
		{"clean", goodToolEnv, nil, Pass},
		{"token mounted", mutate(t, goodToolEnv, "token_paths", []string{"/var/run/secrets/kubernetes.io/serviceaccount"}), nil, Fail},
		{"secret mount", mutate(t, goodToolEnv, "token_mounts", []string{"1 2 0:3 / /var/run/secrets/kubernetes.io/serviceaccount ro"}), nil, Fail},
		{"cluster variable", mutate(t, goodToolEnv, "env_names", []string{"KUBERNETES_SERVICE_HOST", "VERIFY_ENV_CANARY"}), nil, Fail},
		{"serve's variable", mutate(t, goodToolEnv, "env_names", []string{"POD_NAME", "VERIFY_ENV_CANARY"}), nil, Fail},
		{"canary missing", mutate(t, goodToolEnv, "canary", nil), nil, Inconclusive},
		{"mountinfo unreadable", deleteKey(t, goodToolEnv, "token_mounts"), nil, Inconclusive},
		{"no answer", "", errors.New("HTTP 502"), Fail},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := judgeToolCredentials(gjson.Parse(c.js), c.perr, "tok", serve)
			if r.Status != c.want || r.Name != "toolcalls/no-credentials" || r.Evidence == "" {
				t.Errorf("%s: %s (%s), want %s", c.name, r.Status, r.Evidence, c.want)
			}
		})
	}
}

func deleteKey(t *testing.T, js, key string) string {
	t.Helper()
	m := gjson.Parse(js).Value().(map[string]any)
	delete(m, key)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestJudgeToolNonRoot(t *testing.T) {
	cases := []struct {
		name string
		js   string
		want Status
	}{
		{"non-root", goodToolEnv, Pass},
		{"uid 0", mutate(t, goodToolEnv, "uid", 0), Fail},
		{"group 0", mutate(t, goodToolEnv, "groups", []int{0}), Fail},
		{"ids missing", `{"probe":"toolenv"}`, Fail},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if r := judgeToolNonRoot(gjson.Parse(c.js), nil); r.Status != c.want {
				t.Errorf("%s, want %s: %s", r.Status, c.want, r.Evidence)
			}
		})
	}
}

func TestJudgeToolReuse(t *testing.T) {
	j1 := gjson.Parse(goodToolEnv)
	fresh := gjson.Parse(`{"probe":"reuse","hostname":"sandbox-tool-fghij","present":[]}`)
	cases := []struct {
		name       string
		j1, j2     gjson.Result
		id2, uid2  string
		err1, err2 error
		want       Status
	}{
		{"two pods", j1, fresh, "sandbox-tool-fghij", "u2", nil, nil, Pass},
		{"same pod", j1, gjson.Parse(`{"probe":"reuse","hostname":"sandbox-tool-abcde","present":[]}`), "sandbox-tool-abcde", "u1", nil, nil, Fail},
		{"marker survives", j1, gjson.Parse(`{"probe":"reuse","hostname":"sandbox-tool-fghij","present":["/tmp/verify-m"]}`), "sandbox-tool-fghij", "u2", nil, nil, Fail},
		{"marker not written", gjson.Parse(mutate(t, goodToolEnv, "marker.written", false)), fresh, "sandbox-tool-fghij", "u2", nil, nil, Inconclusive},
		{"uid unseen", j1, fresh, "sandbox-tool-fghij", "", nil, nil, Inconclusive},
		{"call 2 failed", j1, gjson.Result{}, "", "", nil, errors.New("HTTP 504"), Fail},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := judgeToolReuse(c.j1, c.err1, c.j2, c.err2, "sandbox-tool-abcde", c.id2, "u1", c.uid2)
			if r.Status != c.want {
				t.Errorf("%s, want %s: %s", r.Status, c.want, r.Evidence)
			}
		})
	}
}

func TestSortPrivate(t *testing.T) {
	cands := []netsec.Target{
		{Kind: netsec.HTTP, Host: "192.168.241.10", Port: 80},
		{Kind: netsec.HTTP, Host: "10.244.0.7", Port: 8080},
		{Kind: netsec.HTTP, Host: "10.96.12.1", Port: 80},
		{Kind: netsec.TCP, Host: "172.18.0.2", Port: 10250},
		{Kind: netsec.TCP, Host: "198.51.100.10", Port: 80}, // not private
		{Kind: netsec.TCP, Host: "not-an-ip", Port: 80},
	}
	ts, missing := sortPrivate(cands)
	got := map[string]int{}
	names := map[string]bool{}
	for _, tg := range ts {
		got[tg.check]++
		if names[tg.Name] {
			t.Errorf("target name %s twice", tg.Name)
		}
		names[tg.Name] = true
	}
	want := map[string]int{"toolcalls/private-10": 2, "toolcalls/private-172-16": 1, "toolcalls/private-192-168": 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d targets, want %d (%v)", k, got[k], v, got)
		}
	}
	if len(missing) != 1 || missing[0].check != "toolcalls/private-100-64" || !missing[0].optional {
		t.Errorf("missing %+v, want only the optional 100.64/10", missing)
	}
}

// toolRun builds a network run in which the control reached every target
// and the tool pod reached those in reached.
func toolRun(ts []netTarget, reached map[string]bool) *netRun {
	run := &netRun{targets: ts, control: map[string]*netsec.Outcome{}, sandbox: &netsec.Report{Outcomes: map[string]*netsec.Outcome{}}}
	for _, tg := range ts {
		run.control[tg.Name] = &netsec.Outcome{Name: tg.Name, Kind: tg.Kind, Reached: true, Answered: true, Token: true, Attempts: 1}
		r := reached[tg.Name]
		run.sandbox.Outcomes[tg.Name] = &netsec.Outcome{Name: tg.Name, Kind: tg.Kind, Reached: r, Answered: r, Token: r, Attempts: 4}
	}
	return run
}

func TestJudgeToolNetwork(t *testing.T) {
	internet := netTarget{Target: netsec.Target{Name: "toolcalls/internet-standin", Kind: netsec.HTTP, Host: "198.51.100.10", Port: 80, Token: "sandbox-canary"},
		check: "toolcalls/internet-standin", property: "16", allowed: true}
	meta := netTarget{Target: netsec.Target{Name: "toolcalls/metadata-standin", Kind: netsec.HTTP, Host: "169.254.169.254", Port: 80, Token: "sandbox-canary"},
		check: "toolcalls/metadata-standin", property: "17"}
	private, missing := sortPrivate([]netsec.Target{
		{Kind: netsec.HTTP, Host: "10.244.0.7", Port: 8080, Token: "t"},
		{Kind: netsec.TCP, Host: "172.18.0.2", Port: 10250},
	})
	ts := append([]netTarget{internet, meta}, private...)

	cases := []struct {
		name    string
		reached map[string]bool
		ctlMiss string // a target the control did not reach
		want    map[string]Status
	}{
		{"confined", map[string]bool{"toolcalls/internet-standin": true}, "", map[string]Status{
			"toolcalls/internet-standin": Pass, "toolcalls/metadata-standin": Pass, "toolcalls/private-10": Pass,
			"toolcalls/private-172-16": Pass, "toolcalls/private-192-168": Inconclusive, "toolcalls/private-100-64": Skip}},
		{"excepts dropped", map[string]bool{"toolcalls/internet-standin": true, "toolcalls/metadata-standin": true,
			"toolcalls/private-10#0": true, "toolcalls/private-172-16#0": true}, "", map[string]Status{
			"toolcalls/internet-standin": Pass, "toolcalls/metadata-standin": Fail, "toolcalls/private-10": Fail, "toolcalls/private-172-16": Fail}},
		{"no internet", map[string]bool{}, "", map[string]Status{"toolcalls/internet-standin": Fail}},
		{"no internet, nor the control", map[string]bool{}, "toolcalls/internet-standin", map[string]Status{"toolcalls/internet-standin": Inconclusive}},
		{"control missed the kubelet", map[string]bool{"toolcalls/internet-standin": true}, "toolcalls/private-172-16#0", map[string]Status{"toolcalls/private-172-16": Inconclusive}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			run := toolRun(ts, c.reached)
			if c.ctlMiss != "" {
				run.control[c.ctlMiss] = &netsec.Outcome{Name: c.ctlMiss, Attempts: 40}
			}
			in := internet
			rs := judgeToolNetwork(run, &in, missing, false)
			for name, want := range c.want {
				if got := statusOf(t, rs, name); got != want {
					t.Errorf("%s: %s, want %s", name, got, want)
				}
			}
		})
	}
	t.Run("probe unusable", func(t *testing.T) {
		run := toolRun(ts, nil)
		run.sandbox, run.sbErr = nil, errors.New("HTTP 504")
		in := internet
		for _, r := range judgeToolNetwork(run, &in, nil, false) {
			if r.Status != Fail {
				t.Errorf("%s: %s, want FAIL without a probe answer", r.Name, r.Status)
			}
		}
	})
	t.Run("egress off", func(t *testing.T) {
		off := internet
		off.allowed = false
		run := toolRun([]netTarget{off}, map[string]bool{off.Name: true})
		if got := statusOf(t, judgeToolNetwork(run, &off, nil, false), "toolcalls/internet-standin"); got != Fail {
			t.Errorf("internet reached with egress off: %s, want FAIL", got)
		}
	})
}

func TestToolSettingsFromDeployment(t *testing.T) {
	dep := func(env map[string]string, args ...string) *appsv1.Deployment {
		c := corev1.Container{Name: "serve", Args: args}
		for k, v := range env {
			c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: v})
		}
		d := &appsv1.Deployment{}
		d.Spec.Template.Spec.Containers = []corev1.Container{c}
		return d
	}
	cases := []struct {
		name     string
		d        *appsv1.Deployment
		image    string
		internet bool
	}{
		{"none", nil, "", true},
		{"prefix then exact", dep(map[string]string{"SANDBOX_TOOL_IMAGES": "registry.example/agents/,agent:1*, agent:dev"}), "agent:dev", true},
		{"flag wins", dep(map[string]string{"SANDBOX_TOOL_IMAGES": "a:1"}, "serve", "--tool-images=b:2", "--no-tool-internet-egress"), "b:2", false},
		{"egress off by env", dep(map[string]string{"SANDBOX_TOOL_IMAGES": "a:1", "SANDBOX_TOOL_INTERNET_EGRESS": "false"}), "a:1", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := toolImageOf(c.d); got != c.image {
				t.Errorf("image %q, want %q", got, c.image)
			}
			if got := internetEgressOn(c.d); got != c.internet {
				t.Errorf("internet %v, want %v", got, c.internet)
			}
		})
	}
	names := serveEnvNames(dep(map[string]string{"PATH": "/bin", "SANDBOX_IMAGE": "x"}))
	if len(names) != 1 || names[0] != "SANDBOX_IMAGE" {
		t.Errorf("serve env names %v, want [SANDBOX_IMAGE]", names)
	}
}

func TestToolTreeJudgedAsTheRunners(t *testing.T) {
	a := &callAnswer{Status: 200, Result: wire.CallResult{SandboxID: "sandbox-tool-x", Process: wire.Process{ExitCode: -1, TimedOut: true, DurationMS: 2050,
		Stdout: "HB sigterm-ignorer 0.30\nHB heartbeat 0.31\nHB setsid-grandchild 0.35\nHB heartbeat 1.90\n"}}}
	if r := judgeTreeAs("toolcalls/timeout-kills-tree", a.asAnswer(), nil); r.Status != Pass || r.Name != "toolcalls/timeout-kills-tree" {
		t.Errorf("tree killed: %s %s: %s", r.Name, r.Status, r.Evidence)
	}
	a.Result.Stdout += "HB setsid-grandchild 5.1\n"
	if r := judgeTreeAs("toolcalls/timeout-kills-tree", a.asAnswer(), nil); r.Status != Fail {
		t.Errorf("grandchild alive at 5.1 s: %s, want FAIL", r.Status)
	}
	var none *callAnswer
	if r := judgeTreeAs("toolcalls/timeout-kills-tree", none.asAnswer(), errors.New("HTTP 504")); r.Status != Fail {
		t.Errorf("no answer: %s, want FAIL", r.Status)
	}
}

// TestCallAsksAgainWhenNotReady: a 504 for a tool pod that was not Ready is
// asked again, at most notReadyRetries times, and said in the evidence;
// other 5xx are not.
func TestCallAsksAgainWhenNotReady(t *testing.T) {
	notReady := `{"error":"tool pod sandbox-tool-x was not Ready within 30s (scheduling and image pull), waiting for: PodInitializing; the pod is deleted"}`
	ok := `{"sandbox_id":"sandbox-tool-y","stdout":"","stderr":"","exit_code":0,"duration_ms":5,"result":1}`
	for _, tc := range []struct {
		name    string
		answers []string // status and body, in turn
		status  int
		calls   int
	}{
		{"ready at the third", []string{"504", notReady, "504", notReady, "200", ok}, 200, 3},
		{"never ready", []string{"504", notReady, "504", notReady, "504", notReady, "200", ok}, 504, 3},
		{"another 504", []string{"504", `{"error":"the call ran out of time"}`, "200", ok}, 504, 1},
		{"a 503", []string{"503", notReady, "200", ok}, 503, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				i := int(calls.Add(1)-1) * 2
				st, _ := strconv.Atoi(tc.answers[i])
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(st)
				_, _ = w.Write([]byte(tc.answers[i+1]))
			}))
			defer srv.Close()
			a, _ := newHTTPSandbox(srv.URL, "").Call(t.Context(), wire.CallRequest{Image: "i", Function: "m:f"})
			if a == nil || a.Status != tc.status || int(calls.Load()) != tc.calls {
				t.Fatalf("answer %+v after %d calls; want HTTP %d after %d", a, calls.Load(), tc.status, tc.calls)
			}
			if got, want := len(a.Earlier), tc.calls-1; got != want || (want > 0 && !strings.Contains(a.describe(), "asked again after HTTP 504")) {
				t.Errorf("earlier %q, described %q; want %d earlier answers said", a.Earlier, a.describe(), want)
			}
		})
	}
}
