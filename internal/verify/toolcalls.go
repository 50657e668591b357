package verify

import (
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/egress"
	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/verify/netsec"
	"github.com/sandboxd/sandbox/wire"
)

// The toolcalls/... checks: POST /v1/call runs a function of an allowed
// image in a one-use pod. Verify needs no image of its own making for them:
// any allowed image has Python, so verify calls its builtins:exec with the
// same probes a snippet runs, and reads what they print.

//go:embed snippets/toolenv.py
var toolEnvScript string

const (
	// toolCallTimeoutS is the probes' timeout_s: the network probe's longest
	// target takes allowedDeadlineS, and a call's pod start is not in it.
	toolCallTimeoutS = 30
	// toolEnvCanary is the request env variable whose arrival shows that
	// the environment the probe reads is the tool's.
	toolEnvCanary = "VERIFY_ENV_CANARY"
	// toolAnswerLimit is the most verify reads of an answer (the service's
	// own bound is 8 MiB).
	toolAnswerLimit = api.MaxCallAnswer + 1<<20
)

// toolSelector selects every tool pod of the namespace.
var toolSelector = kube.ToolSelector("").String()

// toolCheckNames lists every check this step reports, for the verdicts that
// cover them all (no /v1/call, no image to call).
var toolCheckNames = []struct{ name, property string }{
	{"toolcalls/internet-standin", "16"},
	{"toolcalls/metadata-standin", "17"},
	{"toolcalls/private-10", "17"},
	{"toolcalls/private-172-16", "17"},
	{"toolcalls/private-192-168", "17"},
	{"toolcalls/private-100-64", "17"},
	{checkToolNodes, propertyToolNodes},
	{checkToolICMP, propertyICMP},
	{"toolcalls/no-credentials", "23"},
	{"toolcalls/non-root", "24"},
	{"toolcalls/no-reuse", "25"},
	{"toolcalls/used-pod-deleted", "25"},
	{"toolcalls/timeout-kills-tree", "26"},
	{"toolcalls/egress-by-name", propertyEgress},
	{"toolcalls/name-not-allowed", propertyEgress},
	{"toolcalls/no-direct-egress", propertyEgress},
	{"toolcalls/rebinding-refused", propertyEgress},
	{"toolcalls/sni-mismatch-refused", propertyEgress},
	{"toolcalls/no-own-dns", propertyEgress},
}

func allToolChecks(st Status, format string, args ...any) []Result {
	var out []Result
	for _, c := range toolCheckNames {
		out = append(out, result(c.name, c.property, st, format, args...))
	}
	return out
}

// callAnswer is one POST /v1/call as verify saw it.
type callAnswer struct {
	Status  int
	Body    string
	Result  wire.CallResult
	Err     string
	Elapsed time.Duration
	// Earlier are the answers of the attempts Call made before this one.
	Earlier []string
}

func (a *callAnswer) ok() bool { return a != nil && a.Status == http.StatusOK }

// asAnswer presents a call's answer as an execution's, for the judges the
// snippet checks share with these.
func (a *callAnswer) asAnswer() *answer {
	if a == nil {
		return nil
	}
	r := a.Result
	return &answer{Status: a.Status, Body: a.Body, Err: a.Err, Elapsed: a.Elapsed, Result: wire.Result{
		SandboxID: r.SandboxID, Process: r.Process,
	}}
}

func (a *callAnswer) describe() string {
	s := a.asAnswer().describe()
	if a.ok() && a.Result.Error != nil {
		s += fmt.Sprintf("; error %s %s: %s", a.Result.Error.Kind, a.Result.Error.Type, clip(a.Result.Error.Message, 200))
	}
	if len(a.Earlier) > 0 {
		s += fmt.Sprintf("; asked again after %s", strings.Join(a.Earlier, ", "))
	}
	return s
}

// callAPI is the service's /v1/call; the HTTP sandbox has it, fakes may not.
type callAPI interface {
	Call(ctx context.Context, req wire.CallRequest) (*callAnswer, error)
}

// notReadyRetries is how many more times Call asks after serve's 504 for a
// tool pod that was not Ready in its time: nothing ran (a busy node started
// the image slowly: PodInitializing after 30 s in a clean-clone run of
// 2026-12-06), and what the checks judge is what code in a tool pod can
// do, which a pod that never started does not show. A client asks again
// too; the answer's error has kube.ToolNotReady.
const notReadyRetries = 2

// Call posts req to /v1/call, again after a 504 for a tool pod that was not
// Ready (notReadyRetries); an error means no usable HTTP answer.
func (s *httpSandbox) Call(ctx context.Context, req wire.CallRequest) (*callAnswer, error) {
	var earlier []string
	for {
		a, err := s.callOnce(ctx, req)
		if a != nil && a.Status == http.StatusGatewayTimeout && strings.Contains(a.Err, kube.ToolNotReady) &&
			len(earlier) < notReadyRetries && ctx.Err() == nil {
			earlier = append(earlier, fmt.Sprintf("HTTP 504 in %s (%s)", a.Elapsed.Round(time.Second), clip(a.Err, 160)))
			continue
		}
		if a != nil {
			a.Earlier = earlier
		}
		return a, err
	}
}

func (s *httpSandbox) callOnce(ctx context.Context, req wire.CallRequest) (*callAnswer, error) {
	status, body, elapsed, err := s.post(ctx, "/v1/call", req, toolAnswerLimit)
	if status == 0 {
		return nil, err
	}
	a := &callAnswer{Status: status, Body: body, Elapsed: elapsed}
	if err != nil {
		return a, err
	}
	if a.Status != http.StatusOK {
		a.Err = gjson.Get(a.Body, "error").String()
		return a, nil
	}
	if !gjson.Valid(a.Body) || !gjson.Get(a.Body, "sandbox_id").Exists() || !gjson.Get(a.Body, "stdout").Exists() {
		return a, fmt.Errorf("HTTP 200 that is not a call result: %q", clip(a.Body, 200))
	}
	if err := json.Unmarshal([]byte(a.Body), &a.Result); err != nil {
		return a, fmt.Errorf("decode call result: %w", err)
	}
	return a, nil
}

// execCall runs code through image's builtins:exec, in globals of its own
// named __main__ (exec without them would define the probe's functions in
// the shim's locals, where they cannot see one another).
func execCall(ctx context.Context, c callAPI, image, code string, env map[string]string, timeout int) (*callAnswer, error) {
	args, err := json.Marshal([]any{code, map[string]string{"__name__": "__main__"}})
	if err != nil {
		return nil, fmt.Errorf("encode args: %w", err)
	}
	// The pod's start (up to the ready timeout) comes on top of the call's.
	rctx, cancel := context.WithTimeout(ctx, time.Duration(timeout)*time.Second+3*time.Minute)
	defer cancel()
	return c.Call(rctx, wire.CallRequest{Image: image, Function: "builtins:exec", Args: args, TimeoutS: timeoutS(timeout), Env: env})
}

// callJSON is snippetJSON for a call: the probe's line, or why there is none.
func callJSON(a *callAnswer, err error, marker string) (gjson.Result, error) {
	if err != nil {
		return gjson.Result{}, err
	}
	if !a.ok() || a.Result.Error != nil {
		return gjson.Result{}, fmt.Errorf("service answered %s", a.describe())
	}
	line, perr := netsec.LastJSONLine(a.Result.Stdout, "probe", marker)
	if perr != nil {
		return gjson.Result{}, fmt.Errorf("%s: %v; stderr: %q", a.describe(), perr, clip(a.Result.Stderr, 300))
	}
	return gjson.Parse(line), nil
}

// checkToolCalls is the toolcalls/* checks, once the service offers /v1/call.
func checkToolCalls(ctx context.Context, e *env) []Result {
	st, body, err := e.probeCall(ctx)
	switch {
	case err != nil:
		return allToolChecks(Inconclusive, "POST /v1/call: %v", err)
	case st == http.StatusNotFound || st == http.StatusMethodNotAllowed:
		return allToolChecks(Skip, "not applicable: the service has no /v1/call (HTTP %d), so there are no tool-call pods to probe", st)
	}
	caller, ok := e.sb.(callAPI)
	if !ok {
		return allToolChecks(Inconclusive, "the service answers /v1/call (HTTP %d %q) but this client cannot call it", st, clip(body, 100))
	}
	dep, derr := e.cs.AppsV1().Deployments(e.opts.Namespace).Get(ctx, e.opts.Service, metav1.GetOptions{})
	if derr != nil {
		dep = nil
	}
	image := e.opts.ToolImage
	if image == "" {
		image = toolImageOf(dep)
	}
	if image == "" {
		return allToolChecks(Inconclusive, "the service answers /v1/call (HTTP %d) but verify knows no image to call: the Deployment's SANDBOX_TOOL_IMAGES has no exact entry (%v); name one with --tool-image", st, derr)
	}
	e.target["tool_image"] = image
	w, err := watchPods(ctx, e.cs, e.opts.Namespace, toolSelector)
	if err != nil {
		return allToolChecks(Inconclusive, "cannot watch the tool pods: %v", err)
	}
	defer w.Close()

	// 1: identity and environment, and a marker for call 2 to look for.
	tok, marker := randomHex(8), randomHex(8)
	e.progress("    tool call 1 (%s builtins:exec): identity, environment, marker", image)
	a1, err1 := execCall(ctx, caller, image, paramsPrefix(map[string]string{"canary_name": toolEnvCanary, "marker": marker})+toolEnvScript,
		map[string]string{toolEnvCanary: tok}, toolCallTimeoutS)
	j1, perr1 := callJSON(a1, err1, "toolenv")
	out := []Result{judgeToolCredentials(j1, perr1, tok, serveEnvNames(dep)), judgeToolNonRoot(j1, perr1)}

	// 2: the network, with the control first, and call 1's marker.
	net, j2, id2, perr2 := e.toolNetwork(ctx, caller, image, j1.Get("marker.path").String(), dep)
	out = append(out, net...)
	id1 := ""
	if a1 != nil {
		id1 = a1.Result.SandboxID
	}
	out = append(out, judgeToolReuse(j1, perr1, j2, perr2, id1, id2, podUIDOf(w, id1), podUIDOf(w, id2)))
	out = append(out, judgeWatchedPodGone(ctx, w, "tool", toolSelector, e.opts.Namespace, "toolcalls/used-pod-deleted", "25", id1))

	// 3: a process tree built to outlive its timeout.
	e.progress("    tool call 3: a process tree past its %ds timeout", timeoutS2)
	code := strings.NewReplacer("%(life)f", fmt.Sprintf("%.1f", treeLife), "%%", "%").Replace(treeScript)
	a3, err3 := execCall(ctx, caller, image, code, nil, timeoutS2)
	if err3 == nil && a3.ok() && a3.Result.Error != nil && !a3.Result.TimedOut {
		err3 = fmt.Errorf("the tree did not run: %s", a3.describe())
	}
	out = append(out, judgeTreeAs("toolcalls/timeout-kills-tree", a3.asAnswer(), err3))

	// 4: egress by name, through the gateway (an image with names).
	out = append(out, e.toolEgress(ctx, caller, dep)...)
	for i := range out {
		if out[i].Property == "" {
			out[i].Property = propertyOf(out[i].Name)
		}
	}
	return out
}

func propertyOf(name string) string {
	for _, c := range toolCheckNames {
		if c.name == name {
			return c.property
		}
	}
	return ""
}

func podUIDOf(w *podWatch, name string) string {
	if s, ok := w.Get(name); ok {
		return string(s.UID)
	}
	return ""
}

// paramsPrefix is the PARAMS_B64 line a probe script starts with.
func paramsPrefix(p any) string {
	b, err := json.Marshal(p)
	if err != nil {
		panic(fmt.Sprintf("verify: marshal params: %v", err)) // plain maps always marshal
	}
	return "PARAMS_B64 = \"" + base64.StdEncoding.EncodeToString(b) + "\"\n"
}

// serveContainer is the Deployment's serve container, nil when unknown.
func serveContainer(dep *appsv1.Deployment) (env map[string]string, args []string, names []string) {
	env = map[string]string{}
	if dep == nil || len(dep.Spec.Template.Spec.Containers) == 0 {
		return env, nil, nil
	}
	c := dep.Spec.Template.Spec.Containers[0]
	for _, v := range c.Env {
		env[v.Name] = v.Value
		names = append(names, v.Name)
	}
	return env, append(append([]string(nil), c.Command...), c.Args...), names
}

// flagValue is the value of --name in args (--name=v or --name v), and
// whether it was there.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// toolImageOf is the first exact entry (not a prefix) of serve's allow list.
func toolImageOf(dep *appsv1.Deployment) string {
	env, args, _ := serveContainer(dep)
	list := env["SANDBOX_TOOL_IMAGES"]
	if v, ok := flagValue(args, "tool-images"); ok {
		list = v
	}
	ims, err := egress.ParseImages([]string{list})
	if err != nil {
		return ""
	}
	for _, p := range ims.Patterns() {
		if !strings.HasSuffix(p, "/") && !strings.HasSuffix(p, "*") {
			return p
		}
	}
	return ""
}

// internetEgressOn reads serve's --[no-]tool-internet-egress (on unless
// said otherwise, as serve's default is).
func internetEgressOn(dep *appsv1.Deployment) bool {
	env, args, _ := serveContainer(dep)
	on := !strings.EqualFold(strings.TrimSpace(env["SANDBOX_TOOL_INTERNET_EGRESS"]), "false")
	for _, a := range args {
		switch a {
		case "--no-tool-internet-egress", "--tool-internet-egress=false":
			on = false
		case "--tool-internet-egress", "--tool-internet-egress=true":
			on = true
		}
	}
	return on
}

// genericEnv are names an image may set for itself that serve's Deployment
// may set too: finding them in a tool's environment proves nothing.
var genericEnv = map[string]bool{"PATH": true, "HOME": true, "HOSTNAME": true, "LANG": true, "LC_ALL": true,
	"TZ": true, "TERM": true, "USER": true, "PYTHONPATH": true, "PYTHONUNBUFFERED": true, "PYTHONDONTWRITEBYTECODE": true}

// serveEnvNames are the variables serve's Deployment sets, which must not
// reach a tool.
func serveEnvNames(dep *appsv1.Deployment) []string {
	_, _, names := serveContainer(dep)
	var out []string
	for _, n := range names {
		if !genericEnv[n] {
			out = append(out, n)
		}
	}
	return out
}
