package verify

import (
	"context"
	_ "embed"
	"fmt"
	"net/netip"
	"strings"

	"github.com/tidwall/gjson"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox/internal/egress"
	"github.com/sandboxd/sandbox/internal/verify/netsec"
)

// The toolcalls/... checks of egress by name: a tool pod whose image has
// names reaches them through the gateway and nothing else. Each has a
// control that reaches the same target another way: verify's control pod
// directly, or (for the hello's name) the same tool pod through the
// gateway with the matching name.

//go:embed snippets/egress.py
var egressScript string

const propertyEgress = "32"

// Default targets, the kind rig's stand-ins: a TLS server on 443 behind
// two names, and names that resolve to a private and the metadata address.
const (
	DefaultEgressAllowed = "allowed.test:443"
	DefaultEgressOther   = "other.test:443"
)

// DefaultEgressRebind are names on the list that resolve into private
// ranges.
var DefaultEgressRebind = []string{"rebind.test:443", "meta.test:443"}

var egressChecks = []string{
	"toolcalls/egress-by-name", "toolcalls/name-not-allowed", "toolcalls/no-direct-egress",
	"toolcalls/rebinding-refused", "toolcalls/sni-mismatch-refused", "toolcalls/no-own-dns",
}

func allEgress(st Status, format string, args ...any) []Result {
	var out []Result
	for _, c := range egressChecks {
		out = append(out, result(c, propertyEgress, st, format, args...))
	}
	return out
}

// egressImageOf is the first exact image of serve's allow list that has
// names, and its list.
func egressImageOf(dep *appsv1.Deployment) (string, egress.Egress) {
	env, args, _ := serveContainer(dep)
	list := env["SANDBOX_TOOL_IMAGES"]
	if v, ok := flagValue(args, "tool-images"); ok {
		list = v
	}
	ims, err := egress.ParseImages([]string{list})
	if err != nil {
		return "", egress.Egress{}
	}
	for _, im := range ims {
		if im.Given && im.Egress.Mode == egress.Names && !strings.HasSuffix(im.Pattern, "/") && !strings.HasSuffix(im.Pattern, "*") {
			return im.Pattern, im.Egress
		}
	}
	return "", egress.Egress{}
}

// egressParams are the probe's parameters, for one mode.
func (e *env) egressParams(mode, dns, direct string) string {
	return paramsPrefix(map[string]any{"mode": mode, "allowed": e.opts.EgressAllowed, "other": e.opts.EgressOther,
		"rebind": e.opts.EgressRebind, "token": e.opts.StandinToken, "dns_server": dns, "direct": direct, "timeout": 5})
}

// toolEgress runs the egress probe in the control pod, then in a tool pod
// of the image with names, and judges both.
func (e *env) toolEgress(ctx context.Context, caller callAPI, dep *appsv1.Deployment) []Result {
	image, allow := egressImageOf(dep)
	if e.opts.EgressImage != "" {
		image = e.opts.EgressImage
	}
	if image == "" {
		return allEgress(Skip, "not applicable: no image of serve's --tool-images has names to reach (IMAGE=api.example.com,...), so no tool pod goes through the egress gateway")
	}
	e.target["egress_image"] = image
	fx, ferr := e.waitFixtures(ctx)
	if ferr != nil {
		return allEgress(Inconclusive, "verify's control pod is not ready, no verdict possible: %v", ferr)
	}
	dns := ""
	if svcs, err := e.cs.CoreV1().Services("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"}); err == nil && len(svcs.Items) > 0 {
		dns = svcs.Items[0].Spec.ClusterIP + ":53"
	}
	e.progress("    control pod %s/%s: the egress targets directly", fx.Namespace, fx.ControlPod)
	res, cerr := podExec(ctx, e.cfg, e.cs, fx.Namespace, fx.ControlPod, fx.ControlName, []string{"python3", "-"}, e.egressParams("control", dns, "")+egressScript)
	var ctl gjson.Result
	if cerr == nil {
		line, err := netsec.LastJSONLine(res.Stdout, "probe", "egress")
		if err != nil {
			cerr = fmt.Errorf("%v; stderr %q", err, clip(res.Stderr, 300))
		}
		ctl = gjson.Parse(line)
	}
	e.progress("    tool call (%s builtins:exec): the egress targets through the gateway", image)
	a, err := execCall(ctx, caller, image, e.egressParams("tool", dns, ctl.Get("direct_addr").String())+egressScript, nil, toolCallTimeoutS)
	tool, terr := callJSON(a, err, "egress")
	return judgeEgress(egressRun{allow: allow, allowed: e.opts.EgressAllowed, other: e.opts.EgressOther, rebind: e.opts.EgressRebind,
		ctl: ctl, ctlErr: cerr, tool: tool, toolErr: terr})
}

// egressRun is what the two probes saw.
type egressRun struct {
	allow          egress.Egress // the image's list, as serve has it (Mode "" when unread)
	allowed, other string
	rebind         []string
	ctl, tool      gjson.Result
	ctlErr         error
	toolErr        error
}

func judgeEgress(r egressRun) []Result {
	if r.toolErr != nil {
		return allEgress(Inconclusive, "the tool call gave no usable answer: %v", r.toolErr)
	}
	host := func(t string) (string, int) {
		h, p, _ := splitHostPort(t)
		return h, p
	}
	if h, p := host(r.allowed); r.allow.Mode == egress.Names && !r.allow.Allows(h, p) {
		return allEgress(Inconclusive, "the image's list (%s) does not hold %s: name one of its hosts that answers TLS with --egress-allowed", r.allow, r.allowed)
	}
	ctlNote := ""
	if r.ctlErr != nil {
		ctlNote = fmt.Sprintf(" (control: %v)", r.ctlErr)
	}
	c, t := r.ctl, r.tool
	var out []Result
	add := func(name string, st Status, format string, args ...any) {
		out = append(out, result(name, propertyEgress, st, format+ctlNote, args...))
	}

	// egress-by-name: the allowed name, through the gateway.
	ev := fmt.Sprintf("https %s: control %s; tool pod (proxy %s) %s", r.allowed, c.Get("allowed").Raw, t.Get("proxy").String(), t.Get("allowed").Raw)
	switch {
	case t.Get("allowed.token").Bool():
		add("toolcalls/egress-by-name", Pass, "reached through the gateway: %s", ev)
	case !c.Get("allowed.token").Bool():
		add("toolcalls/egress-by-name", Inconclusive, "the control did not reach it either: %s", ev)
	default:
		add("toolcalls/egress-by-name", Fail, "the control reached it and the tool pod, whose list holds it, did not: %s", ev)
	}

	// name-not-allowed: another internet name, through the gateway.
	ev = fmt.Sprintf("https %s: control %s; tool pod %s", r.other, c.Get("other").Raw, t.Get("other").Raw)
	switch {
	case t.Get("other.ok").Bool():
		add("toolcalls/name-not-allowed", Fail, "the tool pod reached a name its list does not hold: %s", ev)
	case !c.Get("other.token").Bool():
		add("toolcalls/name-not-allowed", Inconclusive, "the control did not reach it, so its refusal proves nothing: %s", ev)
	default:
		add("toolcalls/name-not-allowed", Pass, "refused: %s", ev)
	}

	// no-direct-egress: the allowed host's address, dialled directly.
	ev = fmt.Sprintf("tcp %s: control %s; tool pod %s", c.Get("direct_addr").String(), c.Get("direct").Raw, t.Get("direct").Raw)
	switch {
	case t.Get("direct.ok").Bool():
		add("toolcalls/no-direct-egress", Fail, "the tool pod reached the allowed host's address around the gateway: %s", ev)
	case !c.Get("direct.ok").Bool() || !t.Get("direct").Exists():
		add("toolcalls/no-direct-egress", Inconclusive, "the control did not reach the address, so the tool pod's miss proves nothing: %s", ev)
	default:
		add("toolcalls/no-direct-egress", Pass, "unreachable from the tool pod: %s", ev)
	}

	// rebinding-refused: names on the list that resolve into private ranges.
	out = append(out, judgeRebinding(r, ctlNote))

	// sni-mismatch-refused: CONNECT to the allowed host, a hello naming the
	// other; the control is the same tunnel with the matching name.
	ev = fmt.Sprintf("CONNECT %s: hello naming it %s; hello naming %s %s", r.allowed, t.Get("sni_same").Raw, strings.Split(r.other, ":")[0], t.Get("sni_other").Raw)
	switch {
	case t.Get("sni_other.handshake").Bool():
		add("toolcalls/sni-mismatch-refused", Fail, "a hello naming another host passed a CONNECT to the allowed one (domain fronting): %s", ev)
	case !t.Get("sni_same.token").Bool():
		add("toolcalls/sni-mismatch-refused", Inconclusive, "the matching hello did not get through either: %s", ev)
	default:
		add("toolcalls/sni-mismatch-refused", Pass, "refused: %s", ev)
	}

	// no-own-dns: the tool pod's own lookups go nowhere.
	ev = fmt.Sprintf("lookup of %s: control %s, tool pod %s; a query to the cluster DNS: control %s, tool pod %s",
		strings.Split(r.allowed, ":")[0], c.Get("lookup_allowed").Raw, t.Get("lookup_allowed").Raw, c.Get("dns").Raw, t.Get("dns").Raw)
	switch {
	case t.Get("lookup_allowed.addrs.#").Int() > 0 || t.Get("dns.answered").Bool():
		add("toolcalls/no-own-dns", Fail, "the tool pod resolved a name itself: %s", ev)
	case c.Get("lookup_allowed.addrs.#").Int() == 0 || !c.Get("dns.answered").Bool():
		add("toolcalls/no-own-dns", Inconclusive, "the control did not resolve it through the cluster DNS: %s", ev)
	default:
		add("toolcalls/no-own-dns", Pass, "no answer in the tool pod: %s", ev)
	}
	return out
}

// judgeRebinding: each rebinding name must be refused by the gateway (403)
// without a dial; the control shows that the name does resolve into a
// range the gateway must refuse.
func judgeRebinding(r egressRun, note string) Result {
	const name = "toolcalls/rebinding-refused"
	if len(r.rebind) == 0 {
		return result(name, propertyEgress, Skip, "not probed: no --egress-rebind name")
	}
	var ev []string
	st := Pass
	worse := func(s Status) {
		if s == Fail || s == Inconclusive && st == Pass {
			st = s
		}
	}
	for _, t := range r.rebind {
		key := strings.ReplaceAll(t, ".", `\.`)
		c, s := r.ctl.Get("rebind."+key), r.tool.Get("rebind."+key)
		ev = append(ev, fmt.Sprintf("%s: control lookup %s, tool pod %s", t, c.Raw, s.Raw))
		private := c.Get("addrs.#").Int() > 0
		for _, a := range c.Get("addrs").Array() {
			if ip, err := netip.ParseAddr(a.String()); err != nil || ip.IsGlobalUnicast() && !ip.IsPrivate() {
				private = false
			}
		}
		// The gateway refuses at once (403); a 502 is its failed dial, and a
		// wait while it carries the allowed name at once is a dial the
		// private range's policy drops.
		dialled := strings.Contains(s.Get("error").String(), "502") ||
			strings.Contains(s.Get("error").String(), "timed out") && r.tool.Get("allowed.token").Bool()
		switch {
		case s.Get("ok").Bool() || dialled:
			worse(Fail)
		case !private:
			worse(Inconclusive)
		case !strings.Contains(s.Get("error").String(), "403"):
			worse(Inconclusive)
		}
	}
	switch st {
	case Fail:
		return result(name, propertyEgress, Fail, "the gateway dialled a name that resolves into a private range: %s%s", strings.Join(ev, "; "), note)
	case Inconclusive:
		return result(name, propertyEgress, Inconclusive, "a name did not resolve into a private range for the control, or the gateway's answer was not its refusal: %s%s", strings.Join(ev, "; "), note)
	}
	return result(name, propertyEgress, Pass, "refused by the gateway (403) without a dial: %s%s", strings.Join(ev, "; "), note)
}
