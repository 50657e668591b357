package verify

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox/internal/egress"
)

// probeCall posts an empty call: a 404 or 405 says the service has no
// /v1/call (tool calls not enabled), anything else that it has one.
func (e *env) probeCall(ctx context.Context) (int, string, error) {
	h, ok := e.sb.(*httpSandbox)
	if !ok {
		return http.StatusNotFound, "", nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.base+"/v1/call", strings.NewReader("{}"))
	if err != nil {
		return 0, "", err
	}
	h.authorize(req)
	resp, err := h.hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 512)
	n, _ := resp.Body.Read(buf)
	b.Write(buf[:n])
	return resp.StatusCode, b.String(), nil
}

// runtimeIsGVisor reads the RuntimeClass of the snippet pods, if any.
func (e *env) runtimeIsGVisor(ctx context.Context) bool {
	rc := e.target["runtime_class"]
	if rc == "" {
		rc = e.opts.RuntimeClass
	}
	if rc == "" {
		return false
	}
	r, err := e.cs.NodeV1().RuntimeClasses().Get(ctx, rc, metav1.GetOptions{})
	if err != nil {
		return false
	}
	return strings.Contains(r.Handler, "runsc") || strings.Contains(r.Handler, "gvisor")
}

// caveats states what is true of every deployment like this one, with what
// this run saw.
func (e *env) caveats(ctx context.Context) []string {
	var out []string
	if dns := e.dnsCaveat(ctx); dns != "" {
		out = append(out, dns)
	}
	if dep, err := e.cs.AppsV1().Deployments(e.opts.Namespace).Get(ctx, e.opts.Service, metav1.GetOptions{}); err == nil {
		if c := internetCaveat(dep); c != "" {
			out = append(out, c)
		}
	}

	// Runtime and kernel.
	rc, known := e.target["runtime_class"]
	handler := "the node's default runtime handler (runc)"
	if !known {
		handler = "an unread runtime (the posture checks did not run, so runtimeClassName was not read; without one it is the node's default, runc)"
	}
	if rc != "" {
		handler = "RuntimeClass " + rc
		if r, err := e.cs.NodeV1().RuntimeClasses().Get(ctx, rc, metav1.GetOptions{}); err == nil {
			handler += " (handler " + r.Handler + ")"
		}
	}
	var nodes []string
	if nl, err := e.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
		for _, n := range nl.Items {
			if node := e.target["node"]; node != "" && node != n.Name {
				continue
			}
			ni := n.Status.NodeInfo
			nodes = append(nodes, fmt.Sprintf("%s: %s, kernel %s, %s, kubelet %s", n.Name, ni.ContainerRuntimeVersion, ni.KernelVersion, ni.OSImage, ni.KubeletVersion))
		}
	}
	e.target["nodes"] = strings.Join(nodes, "; ")
	if e.target["runtime_seen_inside"] == "gVisor" {
		out = append(out, fmt.Sprintf("Snippet pods run under %s, gVisor: syscalls are served by its user-space kernel, a smaller attack surface than the host kernel. Seen from outside: %s.", handler, strings.Join(nodes, "; ")))
	} else {
		out = append(out, fmt.Sprintf("Snippet pods run under %s: containers share the host kernel, so a kernel exploit escapes the sandbox (no VM or gVisor boundary). Seen from outside: %s.", handler, strings.Join(nodes, "; ")))
	}
	if e.opts.MetadataAddr == "" || e.opts.InternetAddr == "" {
		out = append(out, "Some stand-in addresses were not given (--metadata-addr, --internet-addr): those targets were not probed.")
	}
	return out
}

// dnsCaveat says, for snippet pods in DNS cluster mode, that DNS is a
// channel out, with what this run saw: best, a fresh name in the canary
// zone resolved by a sandbox to the zone's own answer (the name reached a
// server outside the cluster). Sealed pods have no such caveat: their
// check is network/dns-exfiltration. "" when sealed.
func (e *env) dnsCaveat(ctx context.Context) string {
	if e.network != nil && e.network.mode.known && e.network.mode.sealed {
		return ""
	}
	dns := "DNS is an exfiltration channel: snippet pods may query the cluster DNS"
	if run := e.network; run != nil && run.sandbox != nil {
		if o := run.sandbox.Outcomes[run.exfil.Name]; o != nil && o.Token {
			dns = fmt.Sprintf("DNS is an exfiltration channel: a sandbox looked up the fresh name %s and got %s, the answer of that zone's server outside the cluster, so the name (and whatever it encodes) left the cluster",
				run.exfil.QName, strings.Join(o.Addrs, ","))
		} else {
			for _, t := range run.targets {
				if t.allowed {
					if o := run.sandbox.Outcomes[t.Name]; o != nil && o.Answered {
						dns = fmt.Sprintf("DNS is an exfiltration channel: a sandbox resolved %s through the cluster DNS (%s, %s)", t.QName, t.Addr(), t.Kind)
						break
					}
				}
			}
		}
	}
	if cm, err := e.cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns", metav1.GetOptions{}); err == nil {
		if cf := cm.Data["Corefile"]; strings.Contains(cf, "forward ") {
			dns += ", and CoreDNS forwards names outside the cluster domain upstream (Corefile: " + firstLineWith(cf, "forward ") + ")"
		}
	}
	return dns + "; data can leave encoded in query names while arbitrary names resolve. This is serve's --snippet-dns cluster; sealed closes the channel."
}

func firstLineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// internetCaveat names every tool image left on the internet (given it, or
// given no egress where the default is internet): its tools reach any
// public address, by any name, with their arguments in hand.
func internetCaveat(dep *appsv1.Deployment) string {
	env, args, _ := serveContainer(dep)
	list := env["SANDBOX_TOOL_IMAGES"]
	if v, ok := flagValue(args, "tool-images"); ok {
		list = v
	}
	def := env["SANDBOX_TOOL_DEFAULT_EGRESS"]
	if v, ok := flagValue(args, "tool-default-egress"); ok {
		def = v
	}
	d, err := egress.Parse(def)
	if err != nil {
		d = egress.Egress{Mode: egress.Internet} // serve's default
	}
	ims, err := egress.ParseImages([]string{list})
	if err != nil || len(ims) == 0 {
		return ""
	}
	var open []string
	for _, im := range ims {
		if e, _ := ims.For(im.Pattern, d); e.Mode == egress.Internet {
			how := "given internet"
			if !im.Given {
				how = "no egress given, default " + d.String()
			}
			open = append(open, im.Pattern+" ("+how+")")
		}
	}
	if len(open) == 0 {
		return ""
	}
	return fmt.Sprintf("Tool images on internet egress reach every public address by any name, and resolve names through the cluster DNS: %s. "+
		"Give each the names it needs (--tool-images IMAGE=api.example.com,...) or none, or make none the default (--tool-default-egress none). Seen in serve's Deployment: SANDBOX_TOOL_IMAGES=%q, default egress %s.",
		strings.Join(open, ", "), list, d)
}
