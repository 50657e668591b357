package verify

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox/wire"
)

//go:embed snippets/tree.py
var treeScript string

// The runner/... checks (their names say whose promise they test: the
// in-pod runner's): the limits one run is held to, its deadline, its
// output, its memory and its processes, and the paths of its input files.

// Numbers of the limit probes.
const (
	// timeoutS2 is the timeout of the spin and tree probes (the spec's 2 s).
	timeoutS2 = 2
	// treeLife is how long the survivors would live: long enough that a
	// runner waiting for their pipes answers visibly late, short enough that
	// such a runner still answers.
	treeLife = 8.0
	// killGrace is how long after the deadline a survivor may still be
	// heard: a runner may send SIGTERM, wait a moment, then SIGKILL.
	killGrace = 1.0
	// floodBytes is the print flood: far beyond any sane output bound and
	// beyond the service's expected memory growth.
	floodBytes = 256 << 20
	// maxKeptOutput is the most output verify accepts back from a flood
	// (the runner keeps 1 MiB per stream by default; 8 MiB leaves room for
	// another setting while still proving a bound).
	maxKeptOutput = 8 << 20
	// rssGrowthLimit is how much the serve process may grow during the
	// flood: a fraction of what it would need to hold the flood.
	rssGrowthLimit = 64 << 20
	// bombCapMiB caps the memory bomb so that a deployment without a limit
	// does not take the node down with it: surviving it is already a FAIL.
	bombCapMiB = 1536
	// forkCap caps the fork bomb for the same reason.
	forkCap = 4096
)

// checkTimeout is runner/timeout (a spin loop is cut at 2 s with the answer
// docs/api.md describes) and runner/timeout-kills-tree (a process tree built
// to survive is dead by the answer).
func checkTimeout(ctx context.Context, e *env) []Result {
	var out []Result
	a, err := e.execute(ctx, "while True:\n    pass\n", timeoutS2)
	out = append(out, judgeSpin(a, err))

	code := strings.NewReplacer("%(life)f", fmt.Sprintf("%.1f", treeLife), "%%", "%").Replace(treeScript)
	a, err = e.execute(ctx, code, timeoutS2)
	out = append(out, judgeTree(a, err))
	return out
}

func judgeSpin(a *answer, err error) Result {
	const name = "runner/timeout"
	if err != nil {
		return result(name, "18", Fail, "%v", err)
	}
	if !a.ok() {
		return result(name, "18", Fail, "service answered %s", a.describe())
	}
	r := a.Result
	want := fmt.Sprintf("timed out after %ds", timeoutS2)
	var bad []string
	if r.ExitCode != -1 {
		bad = append(bad, fmt.Sprintf("exit_code %d, want -1", r.ExitCode))
	}
	if !strings.HasSuffix(strings.TrimSpace(r.Stderr), want) {
		bad = append(bad, fmt.Sprintf("stderr does not end with %q: %q", want, clip(r.Stderr, 120)))
	}
	if ms := r.DurationMS; ms < timeoutS2*1000-200 || ms > timeoutS2*1000+int64(killGrace*1000)+500 {
		bad = append(bad, fmt.Sprintf("duration %d ms, want about %d s", ms, timeoutS2))
	}
	ev := fmt.Sprintf("%s; answered in %s", a.describe(), a.Elapsed.Round(time.Millisecond))
	if len(bad) > 0 {
		return result(name, "18", Fail, "%s: %s", strings.Join(bad, "; "), ev)
	}
	return result(name, "18", Pass, "while True: pass, timeout %ds: %s", timeoutS2, ev)
}

var heartbeat = regexp.MustCompile(`(?m)^HB (\S+) ([0-9.]+)$`)

// judgeTree reads the survivors' heartbeats. Every survivor must have been
// heard before the deadline (they did start: the positive control), and none
// after deadline+killGrace; the answer must not wait for them either.
func judgeTree(a *answer, err error) Result {
	return judgeTreeAs("runner/timeout-kills-tree", a, err)
}

// judgeTreeAs is judgeTree for the check called name (the tool-call check
// runs the same tree in a tool pod).
func judgeTreeAs(name string, a *answer, err error) Result {
	if err != nil {
		return result(name, "18", Fail, "%v", err)
	}
	if !a.ok() {
		return result(name, "18", Fail, "service answered %s", a.describe())
	}
	r := a.Result
	first, last := map[string]float64{}, map[string]float64{}
	for _, m := range heartbeat.FindAllStringSubmatch(r.Stdout+"\n"+r.Stderr, -1) {
		t, _ := strconv.ParseFloat(m[2], 64)
		if _, ok := first[m[1]]; !ok || t < first[m[1]] {
			first[m[1]] = t
		}
		last[m[1]] = max(last[m[1]], t)
	}
	limit := float64(timeoutS2) + killGrace
	var ev []string
	var late, unseen []string
	for _, tag := range []string{"sigterm-ignorer", "setsid-grandchild", "heartbeat"} {
		f, ok := first[tag]
		if !ok || f > timeoutS2 {
			unseen = append(unseen, tag)
			continue
		}
		ev = append(ev, fmt.Sprintf("%s heard %.2f-%.2fs", tag, f, last[tag]))
		if last[tag] > limit {
			late = append(late, fmt.Sprintf("%s alive at %.2fs", tag, last[tag]))
		}
	}
	summary := fmt.Sprintf("%s; answered in %s; %s", a.describe(), a.Elapsed.Round(time.Millisecond), strings.Join(ev, ", "))
	switch {
	case len(late) > 0:
		return result(name, "18", Fail, "survivors outlived the %ds timeout by more than %.0fs: %s: %s", timeoutS2, killGrace, strings.Join(late, ", "), summary)
	case float64(r.DurationMS) > limit*1000+500:
		return result(name, "18", Fail, "the answer waited %d ms (for the survivors' pipes?): %s", r.DurationMS, summary)
	case r.ExitCode != -1 || !r.TimedOut:
		return result(name, "18", Fail, "not reported as a timeout: %s", summary)
	case len(unseen) > 0:
		return result(name, "18", Inconclusive, "survivors %v were never heard before the deadline, so their silence after it proves nothing: %s", unseen, summary)
	}
	return result(name, "18", Pass, "no heartbeat later than %.1fs from a SIGTERM-ignoring child, a setsid() grandchild and an own-group heartbeat program (they would have lived %.0fs): %s", limit, treeLife, summary)
}

// checkFlood is runner/flood-bounded and runner/flood-service-memory: a
// flood of output is cut to the cap without growing the service.
func checkFlood(ctx context.Context, e *env) []Result {
	before, berr := e.serveRSS(ctx)
	code := fmt.Sprintf("import sys\nchunk = 'x' * 65535 + '\\n'\nfor _ in range(%d):\n    sys.stdout.write(chunk)\nsys.stdout.flush()\nsys.stderr.write('e' * %d)\n",
		floodBytes/65536, 16<<20)
	a, err := e.execute(ctx, code, 30)
	after, aerr := e.serveRSS(ctx)
	out := []Result{judgeFlood(a, err)}
	const mem = "runner/flood-service-memory"
	switch {
	case berr != nil || aerr != nil:
		out = append(out, result(mem, "19", Inconclusive, "serve's process_resident_memory_bytes not readable from /metrics: %v", firstErr(berr, aerr)))
	case after-before > rssGrowthLimit:
		out = append(out, result(mem, "19", Fail, "serve RSS grew %d MiB during a %d MiB flood (before %d MiB, after %d MiB)", (after-before)>>20, floodBytes>>20, before>>20, after>>20))
	default:
		out = append(out, result(mem, "19", Pass, "serve RSS %d MiB before, %d MiB after a %d MiB flood (limit +%d MiB)%s", before>>20, after>>20, floodBytes>>20, rssGrowthLimit>>20, e.replicaNote()))
	}
	return out
}

func judgeFlood(a *answer, err error) Result {
	const name = "runner/flood-bounded"
	if err != nil {
		return result(name, "19", Fail, "%v", err)
	}
	if !a.ok() {
		return result(name, "19", Fail, "service answered %s", a.describe())
	}
	r := a.Result
	ev := fmt.Sprintf("%d MiB printed: %s", floodBytes>>20, a.describe())
	switch {
	case r.OOMKilled:
		return result(name, "19", Fail, "the flood was held in memory until the pod was killed: %s", ev)
	case !r.StdoutTruncated:
		return result(name, "19", Fail, "stdout_truncated is false: %s", ev)
	case len(r.Stdout) > maxKeptOutput || len(r.Stderr) > maxKeptOutput:
		return result(name, "19", Fail, "output not bounded (limit %d MiB): %s", maxKeptOutput>>20, ev)
	case len(r.Stdout) == 0:
		return result(name, "19", Fail, "no output kept at all: %s", ev)
	}
	return result(name, "19", Pass, "%s", ev)
}

var rssLine = regexp.MustCompile(`(?m)^process_resident_memory_bytes\s+([0-9.e+]+)`)

// serveRSS reads the serve process's resident memory: from its /metrics
// when it exports process_resident_memory_bytes, else from /proc/1/status
// inside the serve pod the port-forward reaches (pods/exec, admin rights).
func (e *env) serveRSS(ctx context.Context) (int64, error) {
	st, body, err := e.sb.Get(ctx, "/metrics")
	if err == nil && st != http.StatusOK {
		err = fmt.Errorf("GET /metrics: HTTP %d", st)
	}
	if err == nil {
		var n int64
		if n, err = parseRSS(body); err == nil {
			return n, nil
		}
	}
	if e.fwd == nil || e.cs == nil {
		return 0, err
	}
	pod, container, perr := e.servePod(ctx)
	if perr != nil {
		return 0, fmt.Errorf("%v; %w", err, perr)
	}
	res, xerr := podExec(ctx, e.cfg, e.cs, e.opts.Namespace, pod, container, []string{"cat", "/proc/1/status"}, "")
	if xerr != nil {
		return 0, fmt.Errorf("%v; %w", err, xerr)
	}
	return parseVmRSS(res.Stdout)
}

var vmRSS = regexp.MustCompile(`(?m)^VmRSS:\s+(\d+) kB`)

func parseVmRSS(status string) (int64, error) {
	m := vmRSS.FindStringSubmatch(status)
	if m == nil {
		return 0, fmt.Errorf("no VmRSS in /proc/1/status of the serve pod")
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	return n << 10, err
}

func parseRSS(metrics string) (int64, error) {
	m := rssLine.FindStringSubmatch(metrics)
	if m == nil {
		return 0, fmt.Errorf("no process_resident_memory_bytes in /metrics")
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("process_resident_memory_bytes %q: %w", m[1], err)
	}
	return int64(f), nil
}

func (e *env) replicaNote() string {
	if e.fwd != nil {
		return "; measured on pod " + e.fwd.Pod + ", the replica that ran the flood"
	}
	return "; through --url: with several replicas /metrics may come from another one"
}

// checkMemoryBomb is runner/memory-bomb-contained and
// runner/after-memory-bomb: allocating without end is stopped, and the
// service serves the next run.
func checkMemoryBomb(ctx context.Context, e *env) []Result {
	code := fmt.Sprintf("hold = []\nfor i in range(%d):\n    hold.append(b'\\x01' * (64 << 20))\n    print('allocated', (i + 1) * 64, 'MiB', flush=True)\nprint('SURVIVED', len(hold) * 64, 'MiB', flush=True)\n", bombCapMiB/64)
	a, err := e.execute(ctx, code, 60)
	const name = "runner/memory-bomb-contained"
	var out []Result
	switch {
	case err != nil:
		out = append(out, result(name, "20", Fail, "%v", err))
	case !a.ok():
		out = append(out, result(name, "20", Fail, "service answered %s (want a result with oom_killed)", a.describe()))
	case strings.Contains(a.Result.Stdout, "SURVIVED"):
		out = append(out, result(name, "20", Fail, "allocated %d MiB without being stopped: %s", bombCapMiB, a.describe()))
	case !a.Result.OOMKilled:
		out = append(out, result(name, "20", Fail, "not reported as out of memory (last line %q): %s", lastLine(a.Result.Stdout), a.describe()))
	default:
		out = append(out, result(name, "20", Pass, "stopped after %q: %s", lastLine(a.Result.Stdout), a.describe()))
	}
	return append(out, e.bystander(ctx, "runner/after-memory-bomb", "20"))
}

// checkForkBomb is runner/fork-bomb-contained: forking stops at a process limit (or the pod
// is killed), and the service still serves the next run.
func checkForkBomb(ctx context.Context, e *env) []Result {
	code := fmt.Sprintf(`import json, os, resource, signal, time
def rd(p):
    try:
        with open(p) as f:
            return f.read().strip()
    except OSError as e:
        return "unreadable: %%s" %% e.strerror
info = {"pids_max": rd("/sys/fs/cgroup/pids.max") if os.path.exists("/sys/fs/cgroup/pids.max") else rd("/sys/fs/cgroup/pids/pids.max"),
        "rlimit_nproc": list(resource.getrlimit(resource.RLIMIT_NPROC))}
pids, err = [], ""
try:
    for i in range(%d):
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        pids.append(pid)
except OSError as e:
    err = "%%s errno=%%d" %% (type(e).__name__, e.errno)
for p in pids:
    os.kill(p, signal.SIGKILL)
for p in pids:
    os.waitpid(p, 0)
print(json.dumps({"probe": "fork", "forked": len(pids), "cap": %d, "error": err, **info}), flush=True)
`, forkCap, forkCap)
	a, err := e.execute(ctx, code, 30)
	out := []Result{judgeFork(a, err)}
	out = append(out, e.bystander(ctx, "runner/after-fork-bomb", "21"))

	// A real fork bomb: every process forks for ever, ignoring failures. It
	// must end as a timeout in about bombTimeoutS, answered by a runner that
	// kept its share of the pod, never as a 5xx from a runner it starved.
	waited := e.waitWarm(ctx)
	a, err = e.executeWithin(ctx, forkBombCode, bombTimeoutS, bombWait)
	out = append(out, judgeForkBombAnswer(a, err, waited))
	a, err = e.execute(ctx, processLimitsCode, 20)
	limits, lerr := e.kubeletPidsLimits(ctx)
	return append(out, judgeProcessLimit(a, err, limits, lerr))
}

// kubeletPidsLimits reads each node's podPidsLimit from its kubelet's
// configz, through the API server's node proxy: the pod's process limit
// sits on the pod's cgroup, which a container cannot see from inside (it
// sees its own, often unlimited, one).
func (e *env) kubeletPidsLimits(ctx context.Context) (map[string]int64, error) {
	if e.cs == nil {
		return nil, errors.New("no cluster to ask")
	}
	nodes, err := e.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	out := map[string]int64{}
	for _, n := range nodes.Items {
		b, err := e.cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", n.Name, "proxy", "configz").DoRaw(ctx)
		if err != nil {
			return nil, fmt.Errorf("kubelet configz of node %s: %w", n.Name, err)
		}
		v := gjson.GetBytes(b, "kubeletconfig.podPidsLimit")
		if !v.Exists() {
			return nil, fmt.Errorf("kubelet configz of node %s has no podPidsLimit", n.Name)
		}
		out[n.Name] = v.Int()
	}
	return out, nil
}

// processLimitsCode reports the process limits a snippet sees. It runs
// apart from the fork bomb: a bomb's output may be lost (serve answers for
// a runner the bomb kept from the CPU), and every pod has the same limits.
const processLimitsCode = `import json, os, resource
def rd(p):
    try:
        with open(p) as f:
            return f.read().strip()
    except OSError as e:
        return "unreadable: %s" % e.strerror
print(json.dumps({"probe": "process-limits",
    "pids_max": rd("/sys/fs/cgroup/pids.max") if os.path.exists("/sys/fs/cgroup/pids.max") else rd("/sys/fs/cgroup/pids/pids.max"),
    "rlimit_nproc": resource.getrlimit(resource.RLIMIT_NPROC)[0]}), flush=True)
`

// forkBombCode forks without end, ignoring failures.
const forkBombCode = `import os
while True:
    try:
        os.fork()
    except OSError:
        pass
`

// Numbers of the fork bomb's answer.
const (
	// bombTimeoutS is the bomb's timeout_s.
	bombTimeoutS = 5
	// bombMargin is how much later than its timeout the answer may come:
	// the kill, the sweep and the answer, with room for a loaded node. A
	// pod's kill takes about 1.5 s of it (duration_ms 6,500 for the 5 s
	// timeout); 2 s left a busy CI node half a second for the rest, and
	// it took 1.6 (2026-12-06). A runner that does not kill the tree never
	// answers at all.
	bombMargin = 5 * time.Second
	// bombWait is how long verify waits for the bomb's answer: past the
	// limit, so that a late answer is reported with its time, and no
	// longer, since a runner that does not kill the tree never answers.
	bombWait = bombTimeoutS*time.Second + 2*bombMargin
)

// judgeForkBombAnswer: a timed-out result (or the snippet's own end) within
// the timeout and bombMargin.
func judgeForkBombAnswer(a *answer, err error, waited string) Result {
	const name = "runner/fork-bomb-answered"
	if err != nil {
		return result(name, "21", Fail, "no answer within %s (limit %s): %v", bombWait, bombTimeoutS*time.Second+bombMargin, err)
	}
	limit := bombTimeoutS*time.Second + bombMargin
	ev := fmt.Sprintf("%s; answered in %s (limit %s); %s", a.describe(), a.Elapsed.Round(time.Millisecond), limit, waited)
	switch {
	case !a.ok():
		return result(name, "21", Fail, "the bomb was not answered with a result (the runner did not survive it?): %s", ev)
	case !a.Result.TimedOut && !a.Result.OOMKilled && a.Result.ExitCode == 0:
		return result(name, "21", Fail, "a fork bomb that never stops ended without a timeout, kill or error: %s", ev)
	case a.Elapsed > limit:
		return result(name, "21", Fail, "answered late: %s", ev)
	}
	return result(name, "21", Pass, "%s", ev)
}

// judgeProcessLimit reports the pod's process limit, and that the
// snippet's own limit leaves the runner room below it. The limit is the
// kubelet's podPidsLimit where the API server lets verify read it (the
// smallest over the nodes), else the pids.max the bomb saw from inside.
func judgeProcessLimit(a *answer, err error, kubelet map[string]int64, kerr error) Result {
	const name = "runner/process-limit"
	line, perr := snippetJSON(a, err, "process-limits")
	if perr != nil {
		return result(name, "21", Fail, "%v", perr)
	}
	pids, nproc := line.Get("pids_max").String(), line.Get("rlimit_nproc").Int()
	if kerr == nil && len(kubelet) > 0 {
		node, limit := "", int64(0)
		for n, l := range kubelet {
			if node == "" || l < limit {
				node, limit = n, l
			}
		}
		switch {
		case limit <= 0:
			return result(name, "21", Fail, "node %s: the kubelet sets no podPidsLimit (%d), so a fork bomb is bounded only by the snippet's RLIMIT_NPROC %d and the node; set podPidsLimit", node, limit, nproc)
		case nproc <= 0 || nproc >= limit:
			return result(name, "21", Fail, "the snippet's RLIMIT_NPROC %d leaves the runner no room below node %s's podPidsLimit %d", nproc, node, limit)
		}
		return result(name, "21", Pass, "podPidsLimit %d (kubelet of node %s; the container sees pids.max %s), the snippet's RLIMIT_NPROC %d: %d tasks kept for the runner",
			limit, node, pids, nproc, limit-nproc)
	}
	max, perr := strconv.ParseInt(pids, 10, 64)
	switch {
	case perr != nil:
		return result(name, "21", Fail, "pids.max %q and the kubelet's podPidsLimit unknown (%v): no process limit seen, so a fork bomb is bounded only by RLIMIT_NPROC %d, "+
			"shared with the runner; set the kubelet's podPidsLimit", pids, kerr, nproc)
	case nproc <= 0 || nproc >= max:
		return result(name, "21", Fail, "RLIMIT_NPROC %d leaves the runner no room below pids.max %d (the kubelet's podPidsLimit unknown: %v)", nproc, max, kerr)
	}
	return result(name, "21", Pass, "pids.max %d seen inside the pod (the kubelet's podPidsLimit unknown: %v), the snippet's RLIMIT_NPROC %d: %d tasks kept for the runner", max, kerr, nproc, max-nproc)
}

func judgeFork(a *answer, err error) Result {
	const name = "runner/fork-bomb-contained"
	if err != nil {
		return result(name, "21", Fail, "%v", err)
	}
	if !a.ok() {
		return result(name, "21", Fail, "service answered %s", a.describe())
	}
	if a.Result.OOMKilled || a.Result.TimedOut {
		return result(name, "21", Pass, "the run was killed and reported: %s", a.describe())
	}
	line, perr := snippetJSON(a, nil, "fork")
	if perr != nil {
		return result(name, "21", Fail, "%v", perr)
	}
	ev := fmt.Sprintf("forked %d of %d, then %q; pids.max %s, RLIMIT_NPROC %s; %s", line.Get("forked").Int(), forkCap,
		line.Get("error").String(), line.Get("pids_max").String(), line.Get("rlimit_nproc").Raw, a.describe())
	if line.Get("forked").Int() >= forkCap || !strings.Contains(line.Get("error").String(), "errno=11") {
		return result(name, "21", Fail, "no process limit stopped the fork loop: %s", ev)
	}
	return result(name, "21", Pass, "%s", ev)
}

// bystander runs a trivial snippet after a bomb: a fresh pod, the right
// answer, and a ready service.
func (e *env) bystander(ctx context.Context, name, property string) Result {
	a, err := e.execute(ctx, "print(6 * 7)", 20)
	if err != nil {
		return result(name, property, Fail, "bystander run: %v", err)
	}
	ready := e.waitReady(ctx)
	if !a.ok() || a.Result.Stdout != "42\n" || a.Result.ExitCode != 0 {
		return result(name, property, Fail, "bystander print(6 * 7): %s, stdout %q; %s", a.describe(), clip(a.Result.Stdout, 80), ready)
	}
	if !strings.HasPrefix(ready, "/readyz 200") {
		return result(name, property, Fail, "bystander print(6 * 7) gave 42 in %s, but the service did not become ready again: %s", a.describe(), ready)
	}
	return result(name, property, Pass, "bystander print(6 * 7) gave 42 in %s; %s", a.describe(), ready)
}

// readyWait is how long the service may take to be ready again after a
// bomb, or to have a warm pod again.
const readyWait = 60 * time.Second

// poolReadyLine is the warm pool's gauge in /metrics.
var poolReadyLine = regexp.MustCompile(`(?m)^sandbox_pool_ready_pods ([0-9.e+]+)$`)

// waitWarm waits until the service has a warm pod, so that a check timing
// its answer does not also time the pool's refill. A service without the
// pool's gauge (the local backend) has nothing to wait for.
func (e *env) waitWarm(ctx context.Context) string {
	start := time.Now()
	for {
		st, body, err := e.sb.Get(ctx, "/metrics")
		if err == nil && st == http.StatusOK {
			m := poolReadyLine.FindStringSubmatch(body)
			if m == nil {
				return "no warm pool to wait for"
			}
			if n, _ := strconv.ParseFloat(m[1], 64); n >= 1 {
				return fmt.Sprintf("a warm pod after %s", time.Since(start).Round(100*time.Millisecond))
			}
		}
		if time.Since(start) > readyWait || ctx.Err() != nil {
			return fmt.Sprintf("no warm pod after %s", readyWait)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitReady polls /readyz until 200 and says how long it took.
func (e *env) waitReady(ctx context.Context) string {
	start := time.Now()
	last := ""
	for {
		st, _, err := e.sb.Get(ctx, "/readyz")
		switch {
		case err != nil:
			last = err.Error()
		case st == http.StatusOK:
			return fmt.Sprintf("/readyz 200 after %s", time.Since(start).Round(100*time.Millisecond))
		default:
			last = fmt.Sprintf("HTTP %d", st)
		}
		if time.Since(start) > readyWait || ctx.Err() != nil {
			return fmt.Sprintf("/readyz still %s after %s", last, readyWait)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// pathCases are the inputs of the path checks; each must be refused with a 400 before
// anything runs.
var pathCases = []struct{ label, path string }{
	{"parent", "../x"},
	{"absolute", "/etc/passwd"},
	{"climb", "a/../../x"},
	{"dot-climb", "./../x"},
	{"NUL byte", "a\x00b"},
	{"over-long", strings.Repeat("a", 5000)},
	{"empty", ""},
}

// checkPaths is runner/input-paths-rejected.
func checkPaths(ctx context.Context, e *env) []Result {
	const name = "runner/input-paths-rejected"
	tok := randomHex(6)
	since := time.Now()
	var bad, good []string
	for _, c := range pathCases {
		req := wire.ExecuteRequest{Code: "print('RAN-" + tok + "')", TimeoutS: timeoutS(5),
			Files: []wire.File{{Path: c.path, Content: "x"}}}
		a, err := e.sb.Execute(ctx, req)
		switch {
		case err != nil:
			bad = append(bad, fmt.Sprintf("%s: %v", c.label, err))
		case a.Status == http.StatusBadRequest && a.Err != "":
			good = append(good, fmt.Sprintf("%s: 400 %q", c.label, clip(a.Err, 80)))
		case strings.Contains(a.Body, "RAN-"+tok):
			bad = append(bad, fmt.Sprintf("%s: the snippet RAN (HTTP %d)", c.label, a.Status))
		default:
			bad = append(bad, fmt.Sprintf("%s: HTTP %d %q, want 400 with an error", c.label, a.Status, clip(a.Body, 100)))
		}
	}
	ev := strings.Join(good, "; ")
	time.Sleep(time.Second) // let the watch catch up with a claim, if one happened
	claims := e.pods.Claims(since)
	if claims > 0 {
		bad = append(bad, fmt.Sprintf("%d snippet pod(s) were claimed while only refused requests were sent", claims))
	}
	ev += fmt.Sprintf("; snippet pods claimed meanwhile: %d", claims)
	ev += "; a symlink out of the working directory cannot be expressed through the API (files are regular files, written through os.Root by the runner): covered by exec's unit tests, not probed here"
	if len(bad) > 0 {
		return []Result{result(name, "22", Fail, "%s; fine: %s", strings.Join(bad, "; "), ev)}
	}
	return []Result{result(name, "22", Pass, "%s", ev)}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
