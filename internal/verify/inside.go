package verify

import (
	"context"
	_ "embed"
	"fmt"
	"sort"
	"strings"

	"github.com/tidwall/gjson"
)

//go:embed snippets/inside.py
var insideScript string

// insideChecks are the results one inside snippet decides, in order.
var insideChecks = []struct{ name, property string }{
	{"inside/non-root-identity", "5"},
	{"inside/no-capabilities", "6"},
	{"inside/no-new-privs", "7"},
	{"inside/seccomp", "8"},
	{"inside/no-service-account-token", "9"},
	{"inside/no-host-access", "10"},
	{"inside/read-only-root", "11"},
}

// checkInside runs the inside/* checks in one sandbox: each run costs a pod.
func checkInside(ctx context.Context, e *env) []Result {
	a, err := e.execute(ctx, insideScript, 30)
	j, perr := snippetJSON(a, err, "inside")
	if perr != nil {
		var out []Result
		for _, c := range insideChecks {
			out = append(out, result(c.name, c.property, Fail, "the inside probe gave no usable answer: %v", perr))
		}
		return out
	}
	gvisor := e.runtimeIsGVisor(ctx) || looksLikeGVisor(j)
	if gvisor {
		e.target["runtime_seen_inside"] = "gVisor"
	}
	return evalInside(j, a.Result.SandboxID, gvisor)
}

// looksLikeGVisor reads gVisor's fixed kernel identity.
func looksLikeGVisor(j gjson.Result) bool {
	return j.Get("kernel").String() == "4.4.0" && strings.Contains(j.Get("proc_version").String(), "#1 SMP Sun Jan 10 15:06:54 PST 2016")
}

// evalInside judges the inside snippet's answer.
func evalInside(j gjson.Result, id string, gvisor bool) []Result {
	in := func(format string, args ...any) string { return id + ": " + fmt.Sprintf(format, args...) }
	var out []Result

	// 5
	ids := map[string]int64{"uid": j.Get("uid").Int(), "euid": j.Get("euid").Int(), "gid": j.Get("gid").Int(), "egid": j.Get("egid").Int()}
	var zero []string
	for _, k := range []string{"uid", "euid", "gid", "egid"} {
		if !j.Get(k).Exists() || ids[k] == 0 {
			zero = append(zero, k)
		}
	}
	for _, g := range j.Get("groups").Array() {
		if g.Int() == 0 {
			zero = append(zero, "supplementary group 0")
		}
	}
	ev := in("uid %d euid %d gid %d egid %d groups %s", ids["uid"], ids["euid"], ids["gid"], ids["egid"], j.Get("groups").Raw)
	out = append(out, passIf(len(zero) == 0, "inside/non-root-identity", "5", ev, "root ids: "+strings.Join(zero, ", ")))

	// 6
	var capBad []string
	threads := j.Get("caps").Array()
	for _, t := range threads {
		for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
			v := t.Get(k).String()
			if strings.Trim(v, "0") != "" || v == "" {
				capBad = append(capBad, fmt.Sprintf("thread %s %s=%s", t.Get("tid").String(), k, orUnknown(v)))
			}
		}
	}
	raw := j.Get("raw_socket")
	rawEv := "raw socket: " + describeErr(raw)
	switch {
	case len(threads) < 2:
		out = append(out, result("inside/no-capabilities", "6", Fail, "%s", in("capabilities read from %d thread(s), want every thread of a 2-thread process: %s", len(threads), j.Get("caps").Raw)))
	case len(capBad) > 0 || raw.Get("opened").Bool():
		out = append(out, result("inside/no-capabilities", "6", Fail, "%s", in("%s; %s", strings.Join(append(capBad, "none else"), ", "), rawEv)))
	case raw.Get("name").String() != "EPERM":
		out = append(out, result("inside/no-capabilities", "6", Inconclusive, "%s", in("all capability sets 0 in %d threads, but the raw socket failed otherwise than EPERM: %s", len(threads), rawEv)))
	default:
		out = append(out, result("inside/no-capabilities", "6", Pass, "%s", in("CapInh/Prm/Eff/Bnd/Amb all 0 in %d threads; %s", len(threads), rawEv)))
	}

	// 7
	nnp := j.Get("no_new_privs")
	out = append(out, passIf(nnp.Exists() && nnp.Int() == 1, "inside/no-new-privs", "7",
		in("prctl(PR_GET_NO_NEW_PRIVS)=%s (/proc says %q)", nnp.Raw, j.Get("status_nnp").String()), "no_new_privs is not set"))

	// 8
	kc := j.Get("keyctl")
	kcEv := fmt.Sprintf("keyctl(KEYCTL_GET_KEYRING_ID) returned %s errno %s", kc.Get("ret").Raw, orUnknown(kc.Get("name").String()))
	mode := j.Get("prctl_seccomp").Int()
	seccompEv := in("prctl(PR_GET_SECCOMP)=%d, /proc Seccomp=%q filters=%q; %s", mode, j.Get("status_seccomp").String(), j.Get("seccomp_filters").String(), kcEv)
	refused := kc.Get("ret").Int() == -1
	switch {
	case kc.Get("skipped").Exists():
		out = append(out, result("inside/seccomp", "8", Inconclusive, "%s", in("%s; keyctl not tried: %s", seccompEv, kc.Get("skipped").String())))
	case !refused:
		out = append(out, result("inside/seccomp", "8", Fail, "%s", seccompEv+": keyctl was allowed"))
	case gvisor:
		out = append(out, result("inside/seccomp", "8", Pass, "%s", seccompEv+" (gVisor: syscalls go to its Sentry, not the host kernel; /proc reads differently)"))
	case mode != 2 && j.Get("status_seccomp").String() != "2":
		out = append(out, result("inside/seccomp", "8", Fail, "%s", seccompEv+": not in seccomp filter mode"))
	case kc.Get("name").String() != "EPERM":
		out = append(out, result("inside/seccomp", "8", Inconclusive, "%s", seccompEv+": refused, but not with the EPERM of a seccomp filter (the kernel may lack keyctl)"))
	default:
		out = append(out, result("inside/seccomp", "8", Pass, "%s", seccompEv))
	}

	// 9
	tokPaths, tokMounts := j.Get("token_paths").Array(), j.Get("token_mounts").Array()
	out = append(out, passIf(j.Get("token_paths").IsArray() && len(tokPaths) == 0 && len(tokMounts) == 0, "inside/no-service-account-token", "9",
		in("token paths present: %s; secret/token mounts: %s; token-like env: %s", j.Get("token_paths").Raw, j.Get("token_mounts").Raw, j.Get("token_env").Raw),
		"a service-account token or secret mount is visible"))

	// 10
	var host []string
	for _, k := range []string{"runtime_sockets", "block_devices", "sensitive_devices"} {
		if n := len(j.Get(k).Array()); n > 0 || !j.Get(k).IsArray() {
			host = append(host, fmt.Sprintf("%s=%s", k, clip(j.Get(k).Raw, 300)))
		}
	}
	if j.Get("sysrq.opened").Bool() {
		host = append(host, "/proc/sysrq-trigger opened for writing")
	}
	ev = in("runtime sockets %s, block devices %s, /dev/mem|kmem|port %s, /proc/sysrq-trigger: %s; other sockets %s; /dev/kmsg present=%v",
		j.Get("runtime_sockets").Raw, clip(j.Get("block_devices").Raw, 200), j.Get("sensitive_devices").Raw, describeErr(j.Get("sysrq")),
		j.Get("sockets").Raw, j.Get("kmsg").Bool())
	out = append(out, passIf(len(host) == 0, "inside/no-host-access", "10", ev, strings.Join(host, "; ")))

	// 11
	out = append(out, judgeWrites(j, in))
	return out
}

// judgeWrites is inside/read-only-root: the root is mounted read-only, writes fail
// everywhere but the working directory and /tmp, and succeed there (the
// positive control: the write test itself works).
func judgeWrites(j gjson.Result, in func(string, ...any) string) Result {
	const name = "inside/read-only-root"
	cwd := j.Get("cwd").String()
	writes := map[string]string{}
	j.Get("writes").ForEach(func(k, v gjson.Result) bool { writes[k.String()] = v.String(); return true })
	var dirs []string
	for d := range writes {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	var wrote, refused []string
	for _, d := range dirs {
		if writes[d] == "written" {
			wrote = append(wrote, d)
		} else {
			refused = append(refused, d+":"+writes[d])
		}
	}
	ev := in("root read-only flag=%v (%s); written: %v; refused: %v", j.Get("root_readonly_flag").Bool(), clip(j.Get("root_mount").Raw, 160), wrote, refused)
	var escaped []string
	for _, d := range wrote {
		// /dev/shm is the pod's own tmpfs, like /tmp.
		if d != cwd && d != "/tmp" && d != "/dev/shm" {
			escaped = append(escaped, d)
		}
	}
	switch {
	case len(writes) == 0:
		return result(name, "11", Fail, "%s", in("no write results"))
	case !j.Get("root_readonly_flag").Bool() || len(escaped) > 0:
		return result(name, "11", Fail, "%s", ev)
	case writes[cwd] != "written" || writes["/tmp"] != "written":
		return result(name, "11", Inconclusive, "%s", ev+" (the working directory or /tmp was not writable either, so the write test shows nothing)")
	}
	return result(name, "11", Pass, "%s", ev)
}

func passIf(ok bool, name, property, evidence, why string) Result {
	if ok {
		return result(name, property, Pass, "%s", evidence)
	}
	return result(name, property, Fail, "%s: %s", why, evidence)
}

func describeErr(r gjson.Result) string {
	if r.Get("opened").Bool() {
		return "OPENED"
	}
	if !r.Exists() {
		return "not reported"
	}
	return fmt.Sprintf("refused %s (errno %d)", r.Get("name").String(), r.Get("errno").Int())
}
