package verify

import (
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
)

// judgeToolCredentials is toolcalls/no-credentials: no service-account
// token in reach, no KUBERNETES_* variable, none of serve's variables. The
// request's canary variable is the positive control: an environment that
// lacks it is not the tool's, and what it lacks proves nothing.
func judgeToolCredentials(j gjson.Result, perr error, canary string, serveNames []string) Result {
	const name, property = "toolcalls/no-credentials", "23"
	if perr != nil {
		return result(name, property, Fail, "the identity probe gave no usable answer: %v", perr)
	}
	names := map[string]bool{}
	for _, n := range j.Get("env_names").Array() {
		names[n.String()] = true
	}
	ev := fmt.Sprintf("%s: %d variables %s", j.Get("hostname").String(), len(names), clip(j.Get("env_names").Raw, 400))
	var bad []string
	if p := j.Get("token_paths").Array(); len(p) > 0 {
		bad = append(bad, "service-account token paths "+j.Get("token_paths").Raw)
	}
	if m := j.Get("token_mounts").Array(); len(m) > 0 {
		bad = append(bad, "secret mounts "+clip(j.Get("token_mounts").Raw, 300))
	}
	var kube, serve []string
	for n := range names {
		if strings.HasPrefix(n, "KUBERNETES_") {
			kube = append(kube, n)
		}
	}
	for _, n := range serveNames {
		if names[n] {
			serve = append(serve, n)
		}
	}
	if len(kube) > 0 {
		bad = append(bad, fmt.Sprintf("cluster variables %v", kube))
	}
	if len(serve) > 0 {
		bad = append(bad, fmt.Sprintf("serve's variables %v", serve))
	}
	if len(bad) > 0 {
		return result(name, property, Fail, "%s: %s", strings.Join(bad, "; "), ev)
	}
	switch {
	case j.Get("canary").String() != canary:
		return result(name, property, Inconclusive, "the request's %s did not arrive (got %s), so this environment may not be the tool's: %s", toolEnvCanary, j.Get("canary").Raw, ev)
	case !j.Get("token_mounts").Exists():
		return result(name, property, Inconclusive, "no token path, but /proc/self/mountinfo was unreadable (%s): %s", j.Get("mountinfo_error").String(), ev)
	}
	return result(name, property, Pass, "request's %s arrived; no service-account token or secret mount, no KUBERNETES_* variable, none of serve's %d variables %v: %s",
		toolEnvCanary, len(serveNames), serveNames, ev)
}

// judgeToolNonRoot is toolcalls/non-root: every id of the tool's process is
// non-zero.
func judgeToolNonRoot(j gjson.Result, perr error) Result {
	const name, property = "toolcalls/non-root", "24"
	if perr != nil {
		return result(name, property, Fail, "the identity probe gave no usable answer: %v", perr)
	}
	var zero []string
	for _, k := range []string{"uid", "euid", "gid", "egid"} {
		if !j.Get(k).Exists() || j.Get(k).Int() == 0 {
			zero = append(zero, k)
		}
	}
	for _, g := range j.Get("groups").Array() {
		if g.Int() == 0 {
			zero = append(zero, "supplementary group 0")
		}
	}
	ev := fmt.Sprintf("%s: uid %s euid %s gid %s egid %s groups %s", j.Get("hostname").String(),
		j.Get("uid").Raw, j.Get("euid").Raw, j.Get("gid").Raw, j.Get("egid").Raw, j.Get("groups").Raw)
	return passIf(len(zero) == 0, name, property, ev, "root ids: "+strings.Join(zero, ", "))
}

// judgeToolReuse is toolcalls/no-reuse: call 2 ran in another pod than
// call 1 (sandbox_id, host name, pod UID) and did not find call 1's marker.
func judgeToolReuse(j1 gjson.Result, perr1 error, j2 gjson.Result, perr2 error, id1, id2, uid1, uid2 string) Result {
	const name, property = "toolcalls/no-reuse", "25"
	switch {
	case perr1 != nil:
		return result(name, property, Fail, "call 1: %v", perr1)
	case perr2 != nil:
		return result(name, property, Fail, "call 2: %v", perr2)
	}
	h1, h2 := j1.Get("hostname").String(), j2.Get("hostname").String()
	ev := fmt.Sprintf("call 1 %s (host %s, uid %s), call 2 %s (host %s, uid %s)", id1, h1, orUnknown(uid1), id2, h2, orUnknown(uid2))
	if !j1.Get("marker.written").Bool() {
		return result(name, property, Inconclusive, "%s; call 1 could not write its marker (%s), so its absence proves nothing", ev, j1.Get("marker").Raw)
	}
	var bad []string
	if id1 == "" || id1 == id2 {
		bad = append(bad, "same or empty sandbox_id")
	}
	if h1 == "" || h1 == h2 {
		bad = append(bad, "same hostname")
	}
	if uid1 != "" && uid1 == uid2 {
		bad = append(bad, "same pod UID")
	}
	if len(j2.Get("present").Array()) > 0 {
		bad = append(bad, "call 1's marker still present: "+j2.Get("present").Raw)
	}
	if len(bad) > 0 {
		return result(name, property, Fail, "%s: %s", strings.Join(bad, "; "), ev)
	}
	if uid1 == "" || uid2 == "" {
		return result(name, property, Inconclusive, "%s; ids differ and the marker is absent, but a pod UID was never seen (is sandbox_id the pod's name?)", ev)
	}
	return result(name, property, Pass, "%s; call 1's marker %s absent in call 2", ev, j1.Get("marker.path").String())
}
