package verify

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/verify/netsec"
)

// Deadlines of the network probes. The control polls long, because a
// canary that has just become Ready may still be settling; the sandbox
// tries its blocked targets again and again for a few seconds, so that one
// lucky packet (a policy not yet in force) shows up as a FAIL; allowed
// targets are polled until they answer.
const (
	controlDeadlineS = 20
	blockedDeadlineS = 3
	allowedDeadlineS = 10
	maxPerGroup      = 3 // nodes, endpoints and warm pods probed per target
	// runnerControlDeadlineS is short: warm pods are claimed by other users
	// of the service, and the sandbox probe must follow quickly.
	runnerControlDeadlineS = 5
)

// netTarget is a target and what it means.
type netTarget struct {
	netsec.Target
	check    string // result name; several targets may share one (a group)
	property string
	allowed  bool // the sandbox must reach it (cluster DNS)
	viaServe bool // the control for it is the serve pod (ingress to snippet pods admits only serve)
	// controlDeadlineS, when set, shortens the control's attempts: for
	// targets that mostly listen nowhere (node ports).
	controlDeadlineS float64
}

// netRun is the network step's raw material, kept for the caveats.
type netRun struct {
	targets []netTarget
	control map[string]*netsec.Outcome
	sandbox *netsec.Report
	sbErr   error
	ctlNote []string
	// The DNS exfiltration lookup, judged apart (judgeExfil).
	mode     dnsMode
	exfil    netTarget
	withZone bool
}

// checkNetwork is probes 12-15: every target first from the controls, then
// from a sandbox, and a verdict per target from the pair.
func checkNetwork(ctx context.Context, e *env) []Result {
	fx, err := e.waitFixtures(ctx)
	if err != nil {
		return []Result{result("network/fixtures", "12", Inconclusive, "canary and control pods not ready, no network verdict possible: %v", err)}
	}
	// 28: a copy of a live pod where no policy applies, watched while the
	// rest of the step runs.
	sc := e.startSealCopy(ctx, fx.Namespace)
	mode := e.snippetDNS(ctx)
	targets, missing := e.networkTargets(ctx, fx, mode)
	targets = append(targets, e.icmpTargets(ctx, fx, checkNetICMP)...)
	var extra []Result
	for _, more := range []func(context.Context) ([]netTarget, []missingTarget){e.servePodTargets, e.nodePortTargets} {
		ts, miss := more(ctx)
		targets, missing = append(targets, ts...), append(missing, miss...)
	}
	if ts, r := e.ipv6Targets(ctx); r != nil {
		extra = append(extra, *r)
	} else {
		targets = append(targets, ts...)
	}
	run := &netRun{targets: targets, control: map[string]*netsec.Outcome{}, mode: mode,
		exfil: e.exfilTarget(randomHex(8)), withZone: e.opts.DNSCanaryZone != ""}
	e.network = run

	// 12: the control pod, for every target outside the sandbox namespace.
	var ctl []netsec.Target
	for _, t := range targets {
		c := t.Target
		c.DeadlineS, c.IntervalS, c.SkipSelf = controlDeadlineS, 0.5, false
		if t.controlDeadlineS > 0 {
			c.DeadlineS = t.controlDeadlineS
		}
		ctl = append(ctl, c)
	}
	if run.withZone {
		x := run.exfil.Target
		x.QName = "control-" + x.QName // a name of its own: the sandbox's must be fresh
		x.DeadlineS = allowedDeadlineS
		ctl = append(ctl, x)
	}
	e.progress("    control pod %s/%s probes %d targets", fx.Namespace, fx.ControlPod, len(ctl))
	res, err := podExec(ctx, e.cfg, e.cs, fx.Namespace, fx.ControlPod, fx.ControlName, []string{"python3", "-"}, netsec.Script(ctl))
	run.mergeControl("control pod", res.Stdout, err)

	// Another sandbox's runner: found as late as possible (warm pods come
	// and go with other users of the service), and controlled from the serve
	// pod, the one client the snippet pods' ingress admits.
	runners := e.runnerTargets(ctx)
	if len(runners) == 0 {
		missing = append(missing, missingTarget{"network/other-sandbox-runner", fmt.Sprintf("no Ready snippet pod to aim at within %s", warmPodWait)})
	} else {
		var srv []netsec.Target
		for _, t := range runners {
			c := t.Target
			c.DeadlineS, c.IntervalS, c.SkipSelf = runnerControlDeadlineS, 0.25, false
			srv = append(srv, c)
		}
		pod, container, serr := e.servePod(ctx)
		if serr == nil {
			e.progress("    serve pod %s probes %d snippet-pod runners", pod, len(srv))
			res, serr = podExec(ctx, e.cfg, e.cs, e.opts.Namespace, pod, container, []string{"python3", "-"}, netsec.Script(srv))
		}
		run.mergeControl("serve pod", res.Stdout, serr)
		run.targets = append(run.targets, runners...)
		targets = run.targets
	}

	// 13-15, 27: the sandbox.
	var sb []netsec.Target
	for _, t := range targets {
		s := t.Target
		s.DeadlineS, s.IntervalS = blockedDeadlineS, 0.25
		if t.allowed {
			s.DeadlineS = allowedDeadlineS
		}
		sb = append(sb, s)
	}
	if mode.sealed || run.withZone {
		x := run.exfil.Target
		x.DeadlineS = allowedDeadlineS
		sb = append(sb, x)
	}
	e.progress("    a sandbox probes %d targets", len(sb))
	a, err := e.execute(ctx, netsec.Script(sb), 30)
	if err == nil && !a.ok() {
		err = fmt.Errorf("service answered %s", a.describe())
	}
	if err == nil {
		run.sandbox, err = netsec.Parse(a.Result.Stdout)
		if err != nil {
			err = fmt.Errorf("%s: %w; stderr %q", a.describe(), err, clip(a.Result.Stderr, 300))
		}
	}
	run.sbErr = err
	out := judgeNetwork(run)
	out = append(out, judgeExfil(run, mode, run.exfil, run.withZone))
	out = append(out, extra...)
	apiCtl := run.control["network/apiserver-service"]
	out = append(out, e.judgeSealCopy(ctx, fx, sc, apiCtl != nil && apiCtl.Reached, apiCtl.Describe()))
	// A target that could not be found is reported, never left out.
	for _, m := range missing {
		out = append(out, result(m.check, "13", Inconclusive, "not probed: %s", m.why))
	}
	return out
}

func (r *netRun) mergeControl(who, stdout string, err error) {
	if err != nil {
		r.ctlNote = append(r.ctlNote, fmt.Sprintf("%s: %v", who, err))
		return
	}
	rep, perr := netsec.Parse(stdout)
	if perr != nil {
		r.ctlNote = append(r.ctlNote, fmt.Sprintf("%s: %v", who, perr))
		return
	}
	for name, o := range rep.Outcomes {
		prev := r.control[name]
		if prev == nil || (!prev.Reached && o.Reached) || (!prev.Token && o.Token) {
			o.Detail = strings.TrimSpace(o.Detail + " via " + who)
			r.control[name] = o
		}
	}
}

// judgeNetwork turns the outcomes into one result per check name, in the
// targets' order.
func judgeNetwork(run *netRun) []Result {
	var order []string
	groups := map[string][]netTarget{}
	for _, t := range run.targets {
		if _, ok := groups[t.check]; !ok {
			order = append(order, t.check)
		}
		groups[t.check] = append(groups[t.check], t)
	}
	var out []Result
	for _, name := range order {
		ts := groups[name]
		property := ts[0].property
		if run.sandbox == nil {
			out = append(out, result(name, property, Fail, "the sandbox's probe gave no usable answer: %v", run.sbErr))
			continue
		}
		var ev []string
		for _, t := range ts {
			ev = append(ev, fmt.Sprintf("%s %s: control %s; sandbox %s", t.Kind, t.Addr(),
				run.control[t.Name].Describe(), run.sandbox.Outcomes[t.Name].Describe()))
		}
		evidence := strings.Join(ev, " | ")
		if len(run.ctlNote) > 0 {
			evidence += " | control errors: " + strings.Join(run.ctlNote, "; ")
		}
		if ts[0].allowed {
			ok := false
			for _, t := range ts {
				ok = ok || netsec.CompareAllowed(run.sandbox.Outcomes[t.Name])
			}
			out = append(out, passIf(ok, name, property, evidence, "the sandbox could not resolve through the cluster DNS"))
			continue
		}
		out = append(out, judgeBlockedGroup(name, property, ts, run, evidence))
	}
	return out
}

// judgeBlockedGroup: one reach by the sandbox fails the group; otherwise
// one member that the control reached and the sandbox did not passes it.
func judgeBlockedGroup(name, property string, ts []netTarget, run *netRun, evidence string) Result {
	var blocked, missed, skipped, broken int
	for _, t := range ts {
		s := run.sandbox.Outcomes[t.Name]
		switch netsec.CompareBlocked(t.Target, run.control[t.Name], s) {
		case netsec.SandboxReached:
			return result(name, property, Fail, "the sandbox reached %s: %s", t.Addr(), evidence)
		case netsec.Blocked:
			blocked++
		case netsec.ControlMissed:
			missed++
		case netsec.SandboxBroken:
			if s != nil && s.Skipped != "" {
				skipped++
			} else {
				broken++
			}
		}
	}
	switch {
	case broken > 0:
		return result(name, property, Fail, "the sandbox's probe has no outcome for %d target(s): %s", broken, evidence)
	case blocked > 0:
		return result(name, property, Pass, "blocked (control reached, sandbox did not): %s", evidence)
	case skipped == len(ts):
		return result(name, property, Inconclusive, "every address was the sandbox's own: %s", evidence)
	}
	return result(name, property, Inconclusive, "the sandbox did not reach it, but neither did the control, so that proves nothing: %s", evidence)
}

// networkTargets discovers the addresses; what cannot be found becomes a
// note, and the check for it is missing from the report rather than passed.
func (e *env) networkTargets(ctx context.Context, fx *fixtures, mode dnsMode) ([]netTarget, []missingTarget) {
	var ts []netTarget
	var missing []missingTarget
	miss := func(check, format string, args ...any) {
		missing = append(missing, missingTarget{check, fmt.Sprintf(format, args...)})
	}
	add := func(check, property string, allowed bool, t netsec.Target) {
		if t.Name == "" {
			t.Name = check
		}
		ts = append(ts, netTarget{Target: t, check: check, property: property, allowed: allowed})
	}
	qname := "kubernetes.default.svc." + e.opts.ClusterDomain

	add("network/canary-pod", "13", false, netsec.Target{Kind: netsec.HTTP, Host: fx.CanaryIP, Port: netsec.CanaryHTTPPort, Token: fx.Token})
	add("network/canary-service", "13", false, netsec.Target{Kind: netsec.HTTP, Host: fx.ServiceIP, Port: netsec.CanaryServicePort, Token: fx.Token})

	if svc, err := e.cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{}); err == nil && len(svc.Spec.Ports) > 0 {
		add("network/apiserver-service", "13", false, netsec.Target{Kind: netsec.TCP, Host: svc.Spec.ClusterIP, Port: int(svc.Spec.Ports[0].Port)})
	} else {
		miss("network/apiserver-service", "service default/kubernetes not found: %v", err)
	}
	eps, err := e.cs.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kubernetes"})
	if err != nil {
		miss("network/apiserver-endpoint", "list the kubernetes EndpointSlices: %v", err)
	} else {
		i := 0
		for _, s := range eps.Items {
			port := 6443
			if len(s.Ports) > 0 && s.Ports[0].Port != nil {
				port = int(*s.Ports[0].Port)
			}
			for _, ep := range s.Endpoints {
				for _, addr := range ep.Addresses {
					if i < maxPerGroup {
						add("network/apiserver-endpoint", "13", false, netsec.Target{Name: fmt.Sprintf("apiserver-endpoint#%d", i), Kind: netsec.TCP, Host: addr, Port: port})
						i++
					}
				}
			}
		}
	}
	nodes, err := e.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		miss("network/kubelet", "list nodes: %v", err)
	} else {
		i := 0
		for _, n := range nodes.Items {
			for _, a := range n.Status.Addresses {
				if a.Type == corev1.NodeInternalIP && i < maxPerGroup {
					port := 10250
					if p := n.Status.DaemonEndpoints.KubeletEndpoint.Port; p != 0 {
						port = int(p)
					}
					add("network/kubelet", "13", false, netsec.Target{Name: fmt.Sprintf("kubelet#%d", i), Kind: netsec.TCP, Host: a.Address, Port: port})
					i++
				}
			}
		}
	}
	for _, sa := range []struct{ check, addr string }{{"network/internet-standin", e.opts.InternetAddr}, {"network/metadata-standin", e.opts.MetadataAddr}} {
		if sa.addr == "" {
			continue
		}
		host, port, err := splitHostPort(sa.addr)
		if err != nil {
			miss(sa.check, "%v", err)
			continue
		}
		add(sa.check, "13", false, netsec.Target{Kind: netsec.HTTP, Host: host, Port: port, Token: e.opts.StandinToken})
	}

	dnsHost := netsec.ResolvConf
	if svcs, err := e.cs.CoreV1().Services("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"}); err == nil && len(svcs.Items) > 0 {
		dnsHost = svcs.Items[0].Spec.ClusterIP
	}
	// Cluster mode: the sandbox must resolve through the cluster DNS.
	// Sealed: it must not reach it at all, while the control does; its own
	// resolv.conf names its runner, so the address must be the Service's.
	switch {
	case !mode.sealed:
		add("network/dns-cluster-udp", "14", true, netsec.Target{Kind: netsec.DNSUDP, Host: dnsHost, Port: 53, QName: qname})
		add("network/dns-cluster-tcp", "14", true, netsec.Target{Kind: netsec.DNSTCP, Host: dnsHost, Port: 53, QName: qname})
	case dnsHost != netsec.ResolvConf:
		add("network/dns-cluster-udp", "14", false, netsec.Target{Kind: netsec.DNSUDP, Host: dnsHost, Port: 53, QName: qname})
		add("network/dns-cluster-tcp", "14", false, netsec.Target{Kind: netsec.DNSTCP, Host: dnsHost, Port: 53, QName: qname})
	default:
		for _, c := range []string{"network/dns-cluster-udp", "network/dns-cluster-tcp"} {
			miss(c, "no kube-dns Service in kube-system: the cluster DNS address of a sealed pod is unknown")
		}
	}
	add("network/dns-other-resolver-pod-udp", "15", false, netsec.Target{Kind: netsec.DNSUDP, Host: fx.CanaryIP, Port: netsec.CanaryDNSPort, QName: qname, Token: netsec.CanaryDNSAnswer})
	add("network/dns-other-resolver-pod-tcp", "15", false, netsec.Target{Kind: netsec.DNSTCP, Host: fx.CanaryIP, Port: netsec.CanaryDNSPort, QName: qname, Token: netsec.CanaryDNSAnswer})
	add("network/dns-other-resolver-service-udp", "15", false, netsec.Target{Kind: netsec.DNSUDP, Host: fx.ServiceIP, Port: netsec.CanaryDNSPort, QName: qname, Token: netsec.CanaryDNSAnswer})
	add("network/dns-other-resolver-service-tcp", "15", false, netsec.Target{Kind: netsec.DNSTCP, Host: fx.ServiceIP, Port: netsec.CanaryDNSPort, QName: qname, Token: netsec.CanaryDNSAnswer})
	if len(ts) > 0 && !hasCheck(ts, "network/apiserver-endpoint") && err == nil {
		miss("network/apiserver-endpoint", "the kubernetes EndpointSlices list no address")
	}
	return ts, missing
}

type missingTarget struct{ check, why string }

// runnerTargets aims at other sandboxes' runners: it waits until the pool
// has two Ready pods, one to run the probe and one to aim at (the probe
// skips its own address).
func (e *env) runnerTargets(ctx context.Context) []netTarget {
	var ts []netTarget
	for i, p := range e.readySnippetPods(ctx, 2) {
		if i == maxPerGroup {
			break
		}
		ts = append(ts, netTarget{Target: netsec.Target{Name: fmt.Sprintf("other-sandbox#%d", i), Kind: netsec.HTTP, Host: p.Status.PodIP,
			Port: runnerPort(&p), Path: "/healthz", SkipSelf: true}, check: "network/other-sandbox-runner", property: "13", viaServe: true})
	}
	return ts
}

func hasCheck(ts []netTarget, check string) bool {
	for _, t := range ts {
		if t.check == check {
			return true
		}
	}
	return false
}

// readySnippetPods waits up to warmPodWait for at least n Ready snippet
// pods and returns those it has then (maybe fewer).
func (e *env) readySnippetPods(ctx context.Context, n int) []corev1.Pod {
	var ready []corev1.Pod
	_ = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, warmPodWait, true, func(ctx context.Context) (bool, error) {
		pods, err := e.cs.CoreV1().Pods(e.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: snippetSelector})
		if err != nil {
			return false, nil //nolint:nilerr // retry until the deadline
		}
		ready = ready[:0]
		for _, p := range pods.Items {
			if podReady(&p) && p.Status.PodIP != "" && !kube.IsClaimed(&p) {
				ready = append(ready, p)
			}
		}
		return len(ready) >= n, nil
	})
	return ready
}

func runnerPort(p *corev1.Pod) int {
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == "runner" {
				return int(port.ContainerPort)
			}
		}
	}
	return 8080
}

func splitHostPort(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("address %q: %w", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("address %q: bad port: %w", addr, err)
	}
	return h, n, nil
}

// servePod picks a Ready pod of the serve Deployment (the one the
// port-forward uses, when there is one) and its first container.
func (e *env) servePod(ctx context.Context) (string, string, error) {
	if e.fwd != nil {
		p, err := e.cs.CoreV1().Pods(e.opts.Namespace).Get(ctx, e.fwd.Pod, metav1.GetOptions{})
		if err == nil && len(p.Spec.Containers) > 0 {
			return p.Name, p.Spec.Containers[0].Name, nil
		}
	}
	svc, err := e.cs.CoreV1().Services(e.opts.Namespace).Get(ctx, e.opts.Service, metav1.GetOptions{})
	if err != nil {
		return "", "", fmt.Errorf("get service %s: %w", e.opts.Service, err)
	}
	pods, err := e.cs.CoreV1().Pods(e.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: svc.Spec.Selector})})
	if err != nil {
		return "", "", fmt.Errorf("list serve pods: %w", err)
	}
	for _, p := range pods.Items {
		if podReady(&p) && len(p.Spec.Containers) > 0 {
			return p.Name, p.Spec.Containers[0].Name, nil
		}
	}
	return "", "", fmt.Errorf("no Ready serve pod")
}
