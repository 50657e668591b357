//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/sandboxd/sandbox/e2e/kindenv"
)

// What the fault tests send: a request a second from a pod that runs on its
// own (kubectl exec and port-forwards go through the API server, which one
// of them stops), each answer a JSON line read back from the pod's log.
const (
	// tickTimeoutS is each snippet's timeout; tickClientS how long the
	// client waits for an answer before it counts the request as hung:
	// the pool wait (30 s), the snippet and room for the rest.
	tickTimeoutS = 5
	tickClientS  = 50
	// tickCallEvery: every so many ticks, a tool call instead.
	tickCallEvery = 10
	// apiOutage is how long the API server is kept away.
	apiOutage = 60 * time.Second
)

// tickScript sends argv[7] requests a second for argv[2] seconds to the
// service at argv[1] (a tool call of image argv[5] every argv[3]-th, a print
// with timeout argv[6] otherwise), each in its own thread, waiting argv[4]
// seconds for its answer, and prints a JSON line per answer as it comes: when it left
// (Unix seconds), what it was, its status (0: no HTTP answer), its error,
// its sandbox id and how long it took.
const tickScript = `import json, os, sys, threading, time, urllib.error, urllib.request
url, secs, call_every, limit, image, timeout = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], int(sys.argv[6])
rate = float(sys.argv[7])
lock = threading.Lock()
def one(i):
    call = i % call_every == call_every - 1
    if call:
        path, body = "/v1/call", {"image": image, "function": "tools.sample:add", "args": [i, 1]}
    else:
        path, body = "/v1/execute", {"code": "print(%d)" % i, "timeout_s": timeout}
    with open(os.environ["SANDBOX_TOKEN_FILE"]) as f:
        auth = "Bearer " + f.read().strip()
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", "Authorization": auth})
    out, t0 = {"i": i, "kind": "call" if call else "execute", "sent": time.time()}, time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=limit) as r:
            b = json.loads(r.read())
            if not isinstance(b, dict):
                b = {"body": b}
            right = b.get("result") == {"sum": i + 1, "args": [i, 1]} if call else b.get("exit_code") == 0 and b.get("stdout") == "%d\n" % i
            out.update(status=r.status, id=b.get("sandbox_id") or "", ok=right)
            if not right:
                # What the wrong answer held, so that the log names it.
                keys = ("body", "result", "error", "exit_code", "timed_out", "oom_killed")
                gist = {k: b[k] for k in keys if k in b}
                out["error"] = "not the answer: %s; stderr %r" % (json.dumps(gist)[:300], str(b.get("stderr") or "")[-200:])
    except urllib.error.HTTPError as e:
        raw = e.read()
        out.update(status=e.code, ok=False)
        try:
            out["error"] = json.loads(raw)["error"]
        except Exception:
            out["error"] = "not a JSON error: %r" % raw[:200]
    except Exception as e:
        out.update(status=0, ok=False, error="%s: %s" % (type(e).__name__, e))
    out["ms"] = round((time.monotonic() - t0) * 1000)
    with lock:
        print(json.dumps(out), flush=True)
# The pod's own network may be programmed a moment after it runs: start
# once the service answers.
for _ in range(120):
    try:
        urllib.request.urlopen(url + "/healthz", timeout=2).read()
        break
    except Exception:
        time.sleep(0.5)
ts, start, i = [], time.monotonic(), 0
while time.monotonic() - start < secs:
    t = threading.Thread(target=one, args=(i,))
    t.start()
    ts.append(t)
    i += 1
    time.sleep(max(0, start + i / rate - time.monotonic()))
for t in ts:
    t.join()
`

// tick is one line of tickScript.
type tick struct {
	I      int     `json:"i"`
	Kind   string  `json:"kind"`
	Sent   float64 `json:"sent"`
	Status int     `json:"status"`
	OK     bool    `json:"ok"`
	ID     string  `json:"id"`
	Error  string  `json:"error"`
	MS     int64   `json:"ms"`
}

func (k tick) sentAt() time.Time { return time.Unix(0, int64(k.Sent*1e9)) }

// ticks is a run of tickScript, read back.
type ticks []tick

// summary says what a caller saw: sent, answered with a result, refused
// with a JSON error (by status), not answered at all, the longest answer.
func (ts ticks) summary() string {
	ok, noAnswer := 0, 0
	byStatus := map[int]int{}
	var longest int64
	for _, k := range ts {
		switch {
		case k.OK:
			ok++
		case k.Status == 0:
			noAnswer++
		default:
			byStatus[k.Status]++
		}
		longest = max(longest, k.MS)
	}
	return fmt.Sprintf("%d sent, %d results, errors by status %v, %d without an answer, longest answer %s",
		len(ts), ok, byStatus, noAnswer, time.Duration(longest)*time.Millisecond)
}

// judge fails t for what no fault may cause: a request without an answer
// (refused, reset or hung), an answer that is neither a right result nor a
// JSON error, a sandbox used twice.
func (ts ticks) judge(t *testing.T) {
	t.Helper()
	seen := map[string]int{}
	for _, k := range ts {
		if k.Status == 0 {
			t.Errorf("%s %d (sent %s): no answer after %d ms: %s", k.Kind, k.I, k.sentAt().Format("15:04:05"), k.MS, k.Error)
			continue
		}
		k.judgeAnswer(t, seen)
	}
}

// judgeAnswer fails t for an HTTP answer no fault may cause: a wrong
// result, an error without a JSON body, a sandbox seen before (seen maps
// each sandbox to its request, and gains k's).
func (k tick) judgeAnswer(t *testing.T, seen map[string]int) {
	t.Helper()
	switch {
	case k.Status == 200 && !k.OK:
		t.Errorf("%s %d: 200 with a wrong result (id %s): %s", k.Kind, k.I, k.ID, k.Error)
	case k.Status != 200 && (k.Error == "" || strings.HasPrefix(k.Error, "not a JSON error")):
		t.Errorf("%s %d: status %d without a JSON error: %s", k.Kind, k.I, k.Status, k.Error)
	}
	if k.OK && k.ID != "" {
		if j, dup := seen[k.ID]; dup {
			t.Errorf("sandbox %s used twice: requests %d and %d", k.ID, j, k.I)
		}
		seen[k.ID] = k.I
	}
}

// errorsBetween lists the distinct errors of requests sent in [from, to),
// with their counts, for the log.
func (ts ticks) errorsBetween(from, to time.Time) string {
	n := map[string]int{}
	for _, k := range ts {
		if !k.OK && !k.sentAt().Before(from) && k.sentAt().Before(to) {
			n[fmt.Sprintf("%s %d %s", k.Kind, k.Status, clipTo(k.Error, 120))]++
		}
	}
	var out []string
	for e, c := range n {
		out = append(out, fmt.Sprintf("%d × %s", c, e))
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// firstOKAfter is the first execution sent at or after from that got its
// result, or false.
func (ts ticks) firstOKAfter(from time.Time) (tick, bool) {
	for _, k := range ts {
		if k.OK && k.Kind == "execute" && !k.sentAt().Before(from) {
			return k, true
		}
	}
	return tick{}, false
}

// tickOpts change the ticking client: zero values are the defaults.
type tickOpts struct {
	rate    float64 // requests a second; 0 is 1
	node    string  // the node the client runs on; "" lets the scheduler choose
	url     string  // the service's address; "" is the Service by name
	clientS int     // how long it waits for an answer; 0 is tickClientS
}

// startTicks starts tickScript for d in a pod of the client namespace and
// returns a function that waits for it to end and reads its answers.
func startTicks(ctx context.Context, t *testing.T, cfg *envconf.Config, d time.Duration) func() ticks {
	t.Helper()
	return startTicksWith(ctx, t, cfg, d, tickOpts{})
}

// startTicksWith is startTicks with o.
func startTicksWith(ctx context.Context, t *testing.T, cfg *envconf.Config, d time.Duration, o tickOpts) func() ticks {
	t.Helper()
	if o.rate == 0 {
		o.rate = 1
	}
	if o.url == "" {
		o.url = fmt.Sprintf("http://%s.%s.svc:80", kindenv.Deployment, kindenv.Namespace)
	}
	if o.clientS == 0 {
		o.clientS = tickClientS
	}
	pod := kindenv.WithToken(sleeperPod(kindenv.ClientNamespace, envconf.RandomName("ticks", 12), Suite(ctx).Image, nil))
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	if o.node != "" {
		pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: o.node}
	}
	pod.Spec.Containers[0].Command = []string{"python3", "-c", tickScript, o.url,
		strconv.Itoa(int(d.Seconds())), strconv.Itoa(tickCallEvery), strconv.Itoa(o.clientS), kindenv.AgentImage, strconv.Itoa(tickTimeoutS),
		strconv.FormatFloat(o.rate, 'f', -1, 64)}
	cs := clientset(ctx, t)
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods(pod.Namespace).Delete(context.WithoutCancel(ctx), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	createReady(ctx, t, cfg, pod)
	return func() ticks {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 2*time.Second, d+2*time.Duration(o.clientS)*time.Second+3*time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil //nolint:nilerr // the API server may still be coming back
			}
			return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, nil
		})
		if err != nil {
			t.Fatalf("the ticking client %s did not end: %v", pod.Name, err)
		}
		raw, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "main"}).DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out ticks
		sc := bufio.NewScanner(strings.NewReader(string(raw)))
		for sc.Scan() {
			var k tick
			if err := json.Unmarshal(sc.Bytes(), &k); err != nil {
				t.Fatalf("the ticking client printed %q: %v", sc.Text(), err)
			}
			out = append(out, k)
		}
		slices.SortFunc(out, func(a, b tick) int { return a.I - b.I })
		if want := int(d.Seconds() * o.rate); len(out) < want-1 {
			t.Errorf("the ticking client printed %d answers, want about %d", len(out), want)
		}
		return out
	}
}

// apiReachable reports whether the API server answers within two seconds.
func apiReachable(ctx context.Context, t *testing.T) bool {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", Suite(ctx).Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rc.Timeout = 2 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err == nil
}

// waitAPI waits until the API server is reachable (or not, with up false)
// and returns when it saw so.
func waitAPI(ctx context.Context, t *testing.T, up bool, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for apiReachable(ctx, t) != up {
		if time.Now().After(deadline) {
			t.Fatalf("the API server reachable=%v not seen within %s", up, within)
		}
		time.Sleep(500 * time.Millisecond)
	}
	return time.Now()
}

// resultAfter gets a result through the service (trying again on 503s,
// within execute's bound) and logs how long after since it came: for a
// fault the ticking client saw no result after.
func resultAfter(ctx context.Context, t *testing.T, cfg *envconf.Config, since time.Time, what string) {
	t.Helper()
	res := execute(ctx, t, forwardToService(ctx, t, cfg), "print(6 * 7)", 10)
	if res.ExitCode != 0 || res.Stdout != "42\n" {
		t.Fatalf("after %s: %+v", what, res)
	}
	t.Logf("a result %s after %s", time.Since(since).Round(time.Second), what)
}

// TestLoadThroughRollout: a rolling update of serve (kubectl rollout
// restart) under load. Every request is answered with a result or the
// documented 503, no sandbox is used twice, and nothing is left behind.
func TestLoadThroughRollout(t *testing.T) {
	f := features.New("load through the Service during a rolling update of serve").
		WithLabel("needs", "service").
		Setup(withLoadClient).
		Assess("answers, not hangs; no pods leak", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			le := loadOf(ctx)
			done := make(chan error, 1)
			go func() {
				select {
				case <-time.After(10 * time.Second):
				case <-ctx.Done():
					done <- ctx.Err()
					return
				}
				patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339))
				_, err := le.cs.AppsV1().Deployments(kindenv.Namespace).Patch(ctx, kindenv.Deployment, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
				done <- err
			}()
			start := time.Now()
			out := le.run(ctx, t, cfg, loadDisruptRequests)
			if err := <-done; err != nil {
				t.Fatalf("rollout restart: %v", err)
			}
			if err := waitRollout(ctx, le.cs, false); err != nil {
				t.Fatalf("the rollout did not finish: %v", err)
			}
			judgeDisruption(t, out, loadDisruptRequests, "load with a rollout restart 10 s in")
			le.waitSettled(ctx, t)
			t.Logf("whole again %s after the load began", time.Since(start).Round(time.Second))
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// TestAPIServerOutage: the API server is stopped for a minute while a
// client sends a request a second. Executions go on from the pools while
// they last and while the callers' token reviews are cached (fail closed
// after: 503 saying the caller cannot be checked), tool calls fail at once
// with a JSON error, no request hangs, and once the API server is back the
// service is whole again: a result, then full pools and no pod left over.
func TestAPIServerOutage(t *testing.T) {
	f := features.New("the API server away for a minute").
		WithLabel("needs", "service").
		Setup(withLoadClient).
		Assess("answers throughout, whole again after", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			le := loadOf(ctx)
			node := Suite(ctx).NodeName
			const manifest, aside = "/etc/kubernetes/manifests/kube-apiserver.yaml", "/etc/kubernetes/kube-apiserver.yaml"
			collect := startTicks(ctx, t, cfg, apiOutage+60*time.Second)
			time.Sleep(10 * time.Second)

			onNode(ctx, t, node, "mv", manifest, aside)
			restored := false
			restore := func() {
				if !restored {
					restored = true
					out, err := exec.CommandContext(context.WithoutCancel(ctx), "docker", "exec", node, "mv", aside, manifest).CombinedOutput()
					if err != nil {
						t.Errorf("put the API server back: %v: %s", err, out)
					}
				}
			}
			t.Cleanup(func() {
				if !restored {
					restore()
					waitAPI(context.WithoutCancel(ctx), t, true, 3*time.Minute) // for the tests after this one
				}
			})
			// The kubelet stops a static pod whose manifest went within its
			// file check period; killing the container makes it now (the
			// kubelet may be at it already: what counts is the wait below).
			out, err := exec.CommandContext(ctx, "docker", "exec", node, "sh", "-c",
				"id=$(crictl ps -q --name '^kube-apiserver$'); [ -z \"$id\" ] || crictl -t 30s stop -t 0 $id").CombinedOutput()
			if err != nil {
				t.Logf("stop the API server's container: %v: %s", err, out)
			}
			down := waitAPI(ctx, t, false, time.Minute)
			t.Logf("the API server is away (%s)", down.Format("15:04:05"))
			time.Sleep(time.Until(down.Add(apiOutage)))
			restore()
			up := waitAPI(ctx, t, true, 3*time.Minute)
			t.Logf("the API server answers again %s after it was put back", time.Since(down.Add(apiOutage)).Round(time.Second))

			ts := collect()
			t.Logf("the client saw: %s", ts.summary())
			t.Logf("errors before the outage: %s", ts.errorsBetween(time.Time{}, down))
			t.Logf("errors during it: %s", ts.errorsBetween(down, up))
			t.Logf("errors after it: %s", ts.errorsBetween(up, time.Now()))
			ts.judge(t)
			if _, ok := ts.firstOKAfter(down); !ok {
				t.Logf("no execution sent during the outage got a result")
			}
			if first, ok := ts.firstOKAfter(up); ok {
				t.Logf("the client's first result after the API server came back: sent %s after", first.sentAt().Sub(up).Round(time.Second))
			} else {
				resultAfter(ctx, t, cfg, up, "the API server came back")
			}
			for _, k := range ts {
				if k.Kind == "call" && !k.sentAt().Before(down) && k.sentAt().Before(up) && !k.OK && k.MS > tickClientS*1000/2 {
					t.Errorf("tool call %d during the outage took %d ms to fail: want a fast error", k.I, k.MS)
				}
			}
			le.waitSettled(ctx, t)
			t.Logf("whole again (full pools, nothing left over) %s after the API server came back", time.Since(up).Round(time.Second))
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// TestContainerRuntimeRestart: containerd on the kind node restarts while a
// client sends a request a second. Running pods keep running (their shims
// outlive containerd); every request is answered with a result or a JSON
// error, and the service is whole again by itself. A pod started around
// the restart still proves its seal before it takes a job (the runner
// refuses one otherwise), so no snippet runs on an unproven network.
func TestContainerRuntimeRestart(t *testing.T) {
	f := features.New("the node's container runtime restarted").
		WithLabel("needs", "service").
		Setup(withLoadClient).
		Assess("answers throughout, whole again after", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			le := loadOf(ctx)
			collect := startTicks(ctx, t, cfg, 45*time.Second)
			time.Sleep(10 * time.Second)
			at := time.Now()
			// The node of a serve replica: on one node, the node; on more,
			// the one whose runtime carries a replica and its pods.
			node := le.servePods(ctx, t)[0].Spec.NodeName
			onNode(ctx, t, node, "systemctl", "restart", "containerd")
			t.Logf("containerd restarted on %s in %s", node, time.Since(at).Round(100*time.Millisecond))
			ts := collect()
			t.Logf("the client saw: %s", ts.summary())
			t.Logf("errors before the restart: %s", ts.errorsBetween(time.Time{}, at))
			t.Logf("errors after it: %s", ts.errorsBetween(at, time.Now()))
			ts.judge(t)
			if first, ok := ts.firstOKAfter(at.Add(time.Second)); ok {
				t.Logf("the client's first result after the restart: sent %s after", first.sentAt().Sub(at).Round(time.Second))
			} else {
				resultAfter(ctx, t, cfg, at, "containerd restarted")
			}
			le.waitSettled(ctx, t)
			t.Logf("whole again (full pools, nothing left over) %s after the restart", time.Since(at).Round(time.Second))
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
