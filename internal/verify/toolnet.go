package verify

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/tidwall/gjson"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox/internal/verify/netsec"
)

// privateRange is a range tool pods must never reach. Optional ranges have
// no address verify can count on finding (100.64.0.0/10 exists only where
// a cloud or a carrier uses it): without one their check is SKIP, the
// others' INCONCLUSIVE.
type privateRange struct {
	check    string
	prefix   netip.Prefix
	optional bool
}

var privateRanges = []privateRange{
	{"toolcalls/private-10", netip.MustParsePrefix("10.0.0.0/8"), false},
	{"toolcalls/private-172-16", netip.MustParsePrefix("172.16.0.0/12"), false},
	{"toolcalls/private-192-168", netip.MustParsePrefix("192.168.0.0/16"), false},
	{"toolcalls/private-100-64", netip.MustParsePrefix("100.64.0.0/10"), true},
}

// sortPrivate puts each candidate in its range, at most maxPerGroup per
// range, in the candidates' order (the addresses the user named first). It
// returns the targets and the ranges left without one.
func sortPrivate(cands []netsec.Target) ([]netTarget, []privateRange) {
	var ts []netTarget
	n := map[string]int{}
	for _, c := range cands {
		a, err := netip.ParseAddr(c.Host)
		if err != nil {
			continue
		}
		for _, r := range privateRanges {
			if r.prefix.Contains(a.Unmap()) && n[r.check] < maxPerGroup {
				c.Name = fmt.Sprintf("%s#%d", r.check, n[r.check])
				ts = append(ts, netTarget{Target: c, check: r.check, property: "17"})
				n[r.check]++
			}
		}
	}
	var missing []privateRange
	for _, r := range privateRanges {
		if n[r.check] == 0 {
			missing = append(missing, r)
		}
	}
	return ts, missing
}

// privateCandidates are the addresses verify knows in a run: those the user
// named, its canary (pod and Service), the API server's Service and the
// nodes' kubelets.
func (e *env) privateCandidates(ctx context.Context, fx *fixtures) []netsec.Target {
	var cs []netsec.Target
	for _, a := range e.opts.PrivateAddrs {
		if h, p, err := splitHostPort(a); err == nil {
			cs = append(cs, netsec.Target{Kind: netsec.HTTP, Host: h, Port: p, Token: e.opts.StandinToken})
		}
	}
	cs = append(cs,
		netsec.Target{Kind: netsec.HTTP, Host: fx.CanaryIP, Port: netsec.CanaryHTTPPort, Token: fx.Token},
		netsec.Target{Kind: netsec.HTTP, Host: fx.ServiceIP, Port: netsec.CanaryServicePort, Token: fx.Token})
	if svc, err := e.cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{}); err == nil && len(svc.Spec.Ports) > 0 {
		cs = append(cs, netsec.Target{Kind: netsec.TCP, Host: svc.Spec.ClusterIP, Port: int(svc.Spec.Ports[0].Port)})
	}
	if nodes, err := e.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
		for _, n := range nodes.Items {
			port := 10250
			if p := n.Status.DaemonEndpoints.KubeletEndpoint.Port; p != 0 {
				port = int(p)
			}
			for _, a := range n.Status.Addresses {
				if a.Type == corev1.NodeInternalIP {
					cs = append(cs, netsec.Target{Kind: netsec.TCP, Host: a.Address, Port: port})
				}
			}
		}
	}
	return cs
}

// toolNetwork is toolcalls/internet-standin, toolcalls/metadata-standin and
// toolcalls/private-*: the control pod probes every target first, then a
// tool call probes them all. The same call looks for call 1's marker, whose
// answer it returns with the call's sandbox_id.
func (e *env) toolNetwork(ctx context.Context, caller callAPI, image, markerPath string, dep *appsv1.Deployment) ([]Result, gjson.Result, string, error) {
	internetOn := internetEgressOn(dep)
	reuseCode := fmt.Sprintf(reuseRead, fmt.Sprintf("[%q]", markerPath))
	fx, ferr := e.waitFixtures(ctx)
	if ferr != nil {
		var out []Result
		for _, c := range toolCheckNames[:8] {
			out = append(out, result(c.name, c.property, Inconclusive, "verify's control pod is not ready, no network verdict possible: %v", ferr))
		}
		a, err := execCall(ctx, caller, image, reuseCode, nil, toolCallTimeoutS)
		reuse, rerr := callJSON(a, err, "reuse")
		if a == nil {
			return out, reuse, "", rerr
		}
		return out, reuse, a.Result.SandboxID, rerr
	}
	var ts []netTarget
	var internet *netTarget
	if h, p, err := splitHostPort(e.opts.InternetAddr); err == nil {
		internet = &netTarget{Target: netsec.Target{Name: "toolcalls/internet-standin", Kind: netsec.HTTP, Host: h, Port: p, Token: e.opts.StandinToken},
			check: "toolcalls/internet-standin", property: "16", allowed: internetOn}
		ts = append(ts, *internet)
	}
	if h, p, err := splitHostPort(e.opts.MetadataAddr); err == nil {
		ts = append(ts, netTarget{Target: netsec.Target{Name: "toolcalls/metadata-standin", Kind: netsec.HTTP, Host: h, Port: p, Token: e.opts.StandinToken},
			check: "toolcalls/metadata-standin", property: "17"})
	}
	private, missing := sortPrivate(e.privateCandidates(ctx, fx))
	ts = append(ts, private...)
	nodes, nerr := e.nodeAddrTargets(ctx, dep)
	ts = append(ts, nodes...)
	ts = append(ts, e.icmpTargets(ctx, fx, checkToolICMP)...)

	run := &netRun{targets: ts, control: map[string]*netsec.Outcome{}}
	var ctl, tool []netsec.Target
	for _, t := range ts {
		c, s := t.Target, t.Target
		c.DeadlineS, c.IntervalS, c.SkipSelf = controlDeadlineS, 0.5, false
		s.DeadlineS, s.IntervalS = blockedDeadlineS, 0.25
		if t.allowed {
			s.DeadlineS = allowedDeadlineS
		}
		ctl, tool = append(ctl, c), append(tool, s)
	}
	e.progress("    control pod %s/%s probes %d tool-call targets", fx.Namespace, fx.ControlPod, len(ctl))
	res, cerr := podExec(ctx, e.cfg, e.cs, fx.Namespace, fx.ControlPod, fx.ControlName, []string{"python3", "-"}, netsec.Script(ctl))
	run.mergeControl("control pod", res.Stdout, cerr)

	e.progress("    tool call 2: %d targets, and call 1's marker", len(tool))
	code := reuseCode + netsec.Script(tool)
	a, err := execCall(ctx, caller, image, code, nil, toolCallTimeoutS)
	id := ""
	if a != nil {
		id = a.Result.SandboxID
	}
	reuse, rerr := callJSON(a, err, "reuse")
	if err == nil && (!a.ok() || a.Result.Error != nil) {
		err = fmt.Errorf("service answered %s", a.describe())
	}
	if err == nil {
		run.sandbox, err = netsec.Parse(a.Result.Stdout)
		if err != nil {
			err = fmt.Errorf("%s: %w; stderr %q", a.describe(), err, clip(a.Result.Stderr, 300))
		}
	}
	run.sbErr = err
	out := judgeToolNetwork(run, internet, missing, len(e.opts.PrivateAddrs) > 0)
	if len(nodes) == 0 {
		out = append(out, result(checkToolNodes, propertyToolNodes, Inconclusive, "no node or API server address to probe: %v", nerr))
	}
	return out, reuse, id, rerr
}

// judgeToolNetwork: the internet stand-in as allowed (or, with egress off,
// blocked), everything else as for snippets, and a verdict for each range
// no address was found in.
func judgeToolNetwork(run *netRun, internet *netTarget, missing []privateRange, named bool) []Result {
	var out []Result
	blocked := &netRun{control: run.control, sandbox: run.sandbox, sbErr: run.sbErr, ctlNote: run.ctlNote}
	for _, t := range run.targets {
		if !t.allowed {
			blocked.targets = append(blocked.targets, t)
		}
	}
	if internet == nil {
		out = append(out, result("toolcalls/internet-standin", "16", Skip, "not probed: no --internet-addr"))
	} else if internet.allowed {
		out = append(out, judgeToolInternet(*internet, run))
	}
	out = append(out, judgeNetwork(blocked)...)
	if !hasCheck(run.targets, "toolcalls/metadata-standin") {
		out = append(out, result("toolcalls/metadata-standin", "17", Skip, "not probed: no --metadata-addr"))
	}
	for _, r := range missing {
		hint := "name one with --private-addr"
		if named {
			hint = "none of --private-addr is in it"
		}
		st := Inconclusive
		if r.optional {
			st = Skip
		}
		out = append(out, result(r.check, "17", st, "no address in %s is known to verify (canary, API server, nodes), so the range was not probed: %s", r.prefix, hint))
	}
	return out
}

// judgeToolInternet: the tool pod must get the stand-in's own answer; a
// miss counts only when the control got it.
func judgeToolInternet(t netTarget, run *netRun) Result {
	const name = "toolcalls/internet-standin"
	if run.sandbox == nil {
		return result(name, "16", Fail, "the tool pod's probe gave no usable answer: %v", run.sbErr)
	}
	c, s := run.control[t.Name], run.sandbox.Outcomes[t.Name]
	ev := fmt.Sprintf("http %s: control %s; tool pod %s", t.Addr(), c.Describe(), s.Describe())
	if len(run.ctlNote) > 0 {
		ev += fmt.Sprintf(" | control errors: %v", run.ctlNote)
	}
	switch {
	case netsec.CompareAllowed(s) && (t.Token == "" || s.Token):
		return result(name, "16", Pass, "reached (tool pods have internet egress): %s", ev)
	case !netsec.ControlOK(t.Target, c):
		return result(name, "16", Inconclusive, "the tool pod did not reach it, but neither did the control: %s", ev)
	}
	return result(name, "16", Fail, "the control reached it and the tool pod did not, though serve gives tool pods internet egress: %s", ev)
}
