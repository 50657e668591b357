package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sandboxd/sandbox/internal/verify/netsec"
	"github.com/sandboxd/sandbox/wire"
)

// podGoneDeadline bounds how long the service may take to delete a used pod;
// it deletes without grace period, so seconds are plenty.
const podGoneDeadline = 30 * time.Second

// reuseWrite writes a marker into the working directory and /tmp and reads
// it back, so that run 2 can look for it.
const reuseWrite = `import json, os, socket
tok = %q
paths = [os.path.join(os.getcwd(), "verify-" + tok), "/tmp/verify-" + tok]
ok = []
for p in paths:
    try:
        with open(p, "w") as f:
            f.write(tok)
        with open(p) as f:
            ok.append(f.read() == tok)
    except OSError as e:
        ok.append(str(e))
print(json.dumps({"probe": "reuse", "hostname": socket.gethostname(), "cwd": os.getcwd(), "paths": paths, "written": ok}))
`

// reuseRead looks for run 1's markers.
const reuseRead = `import json, os, socket
paths = json.loads(%q)
print(json.dumps({"probe": "reuse", "hostname": socket.gethostname(), "cwd": os.getcwd(),
                  "present": [p for p in paths if os.path.exists(p)]}))
`

// checkReuse is lifecycle/no-reuse (two runs in a row share nothing) and
// lifecycle/used-pod-deleted.
func checkReuse(ctx context.Context, e *env) []Result {
	const noReuse, gone = "lifecycle/no-reuse", "lifecycle/used-pod-deleted"
	tok := randomHex(8)
	a1, err1 := e.execute(ctx, fmt.Sprintf(reuseWrite, tok), 20)
	r1, perr1 := snippetJSON(a1, err1, "reuse")
	if perr1 != nil {
		return []Result{result(noReuse, "1", Fail, "run 1: %v", perr1), result(gone, "1", Fail, "run 1 failed, nothing to watch")}
	}
	var paths []string
	for _, p := range r1.Get("paths").Array() {
		paths = append(paths, p.String())
	}
	pathsJSON, _ := json.Marshal(paths)
	a2, err2 := e.execute(ctx, fmt.Sprintf(reuseRead, string(pathsJSON)), 20)
	r2, perr2 := snippetJSON(a2, err2, "reuse")

	var out []Result
	id1 := a1.Result.SandboxID
	switch {
	case perr2 != nil:
		out = append(out, result(noReuse, "1", Fail, "run 2: %v", perr2))
	default:
		out = append(out, judgeReuse(id1, a2.Result.SandboxID, r1, r2, e.podUID(id1), e.podUID(a2.Result.SandboxID)))
	}
	out = append(out, e.judgePodGone(ctx, gone, "1", id1))
	return out
}

// judgeReuse decides lifecycle/no-reuse from the two runs' answers and the pods' UIDs
// ("" when the watch never saw the pod).
func judgeReuse(id1, id2 string, r1, r2 gjson.Result, uid1, uid2 string) Result {
	const name = "lifecycle/no-reuse"
	ev := fmt.Sprintf("run 1 %s (host %s, uid %s), run 2 %s (host %s, uid %s)",
		id1, r1.Get("hostname").String(), orUnknown(uid1), id2, r2.Get("hostname").String(), orUnknown(uid2))
	for _, w := range r1.Get("written").Array() {
		if w.Type != gjson.True {
			return result(name, "1", Inconclusive, "%s; run 1 could not write its markers (%s), so their absence proves nothing", ev, r1.Get("written").Raw)
		}
	}
	var bad []string
	if id1 == "" || id2 == "" || id1 == id2 {
		bad = append(bad, "same or empty sandbox_id")
	}
	if h1, h2 := r1.Get("hostname").String(), r2.Get("hostname").String(); h1 == "" || h1 == h2 {
		bad = append(bad, "same hostname")
	}
	if uid1 != "" && uid1 == uid2 {
		bad = append(bad, "same pod UID")
	}
	if present := r2.Get("present").Array(); len(present) > 0 {
		bad = append(bad, "run 1's files still present: "+r2.Get("present").Raw)
	}
	if len(bad) > 0 {
		return result(name, "1", Fail, "%s: %s", strings.Join(bad, "; "), ev)
	}
	if uid1 == "" || uid2 == "" {
		return result(name, "1", Inconclusive, "%s; ids differ and run 1's files %s are absent in run 2, but a pod UID was never seen (is sandbox_id the pod name?)", ev, r1.Get("paths").Raw)
	}
	return result(name, "1", Pass, "%s; run 1's files %s absent in run 2", ev, r1.Get("paths").Raw)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// judgePodGone waits for the used pod to leave the API.
func (e *env) judgePodGone(ctx context.Context, name, property, podName string) Result {
	return judgeWatchedPodGone(ctx, e.pods, "snippet", snippetSelector, e.opts.Namespace, name, property, podName)
}

// judgeWatchedPodGone waits for podName to leave the API, as w (which
// follows the kind of pods that selector selects in ns) sees it.
func judgeWatchedPodGone(ctx context.Context, w *podWatch, kind, selector, ns, name, property, podName string) Result {
	if podName == "" {
		return result(name, property, Fail, "no sandbox_id to look for")
	}
	seen, ok := w.Get(podName)
	if !ok {
		return result(name, property, Inconclusive, "pod %s was never seen among the %s pods (%s) of %s", podName, kind, selector, ns)
	}
	wctx, cancel := context.WithTimeout(ctx, podGoneDeadline)
	defer cancel()
	start := time.Now()
	at, err := w.WaitDeleted(wctx, podName)
	if err != nil {
		return result(name, property, Fail, "pod %s (uid %s) still in the API %s after its run", podName, seen.UID, time.Since(start).Round(time.Millisecond))
	}
	return result(name, property, Pass, "pod %s (uid %s) deleted; the watch saw it go at %s", podName, seen.UID, at.Format(time.RFC3339Nano))
}

// checkParallel is lifecycle/parallel-distinct: N concurrent runs get N distinct pods.
func checkParallel(ctx context.Context, e *env) []Result {
	const name = "lifecycle/parallel-distinct"
	n := e.opts.Parallel
	answers := make([]*answer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			answers[i], errs[i] = e.execute(ctx, `import json, socket; print(json.dumps({"probe": "host", "hostname": socket.gethostname()}))`, 20)
		})
	}
	wg.Wait()
	ids, hosts, uids := map[string]bool{}, map[string]bool{}, map[string]bool{}
	var ev []string
	for i := range n {
		r, err := snippetJSON(answers[i], errs[i], "host")
		if err != nil {
			return []Result{result(name, "2", Fail, "run %d of %d: %v", i+1, n, err)}
		}
		id := answers[i].Result.SandboxID
		ids[id], hosts[r.Get("hostname").String()] = true, true
		if u := e.podUID(id); u != "" {
			uids[u] = true
		}
		ev = append(ev, fmt.Sprintf("%s (uid %s)", id, orUnknown(e.podUID(id))))
	}
	if len(ids) != n || len(hosts) != n || (len(uids) > 0 && len(uids) != n) {
		return []Result{result(name, "2", Fail, "%d concurrent runs got %d ids, %d hostnames, %d pod UIDs: %s", n, len(ids), len(hosts), len(uids), strings.Join(ev, ", "))}
	}
	return []Result{result(name, "2", Pass, "%d concurrent runs, %d distinct pods: %s", n, n, strings.Join(ev, ", "))}
}

// snippetJSON returns the snippet's JSON answer line, the last one whose
// "probe" is marker. Every way an answer can be unusable is an error, which
// the caller reports as FAIL.
func snippetJSON(a *answer, err error, marker string) (gjson.Result, error) {
	if err != nil {
		return gjson.Result{}, err
	}
	if !a.ok() {
		return gjson.Result{}, fmt.Errorf("service answered %s", a.describe())
	}
	line, perr := netsec.LastJSONLine(a.Result.Stdout, "probe", marker)
	if perr != nil {
		return gjson.Result{}, fmt.Errorf("%s: %v; stderr: %q", a.describe(), perr, clip(a.Result.Stderr, 300))
	}
	return gjson.Parse(line), nil
}

// execute runs code through the public API with timeout seconds, waiting
// for the answer up to 30 s past it.
func (e *env) execute(ctx context.Context, code string, timeout int) (*answer, error) {
	return e.executeWithin(ctx, code, timeout, time.Duration(timeout+30)*time.Second)
}

// executeWithin is execute waiting for the answer up to wait.
func (e *env) executeWithin(ctx context.Context, code string, timeout int, wait time.Duration) (*answer, error) {
	rctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return e.sb.Execute(rctx, wire.ExecuteRequest{Code: code, TimeoutS: timeoutS(timeout)})
}

// podUID is the UID of the snippet pod named id, "" when never seen.
func (e *env) podUID(id string) string {
	if e.pods == nil {
		return ""
	}
	s, ok := e.pods.Get(id)
	if !ok {
		return ""
	}
	return string(s.UID)
}
