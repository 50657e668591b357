//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/sandboxd/sandbox/e2e/kindenv"
	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/kube"
)

// The load the service must hold, as a user's agents would send it.
const (
	// loadRequests: enough to drain and refill the pools many times over
	// (300 took ten minutes of the CI hour, 150 six, 100 four, for no more
	// evidence: 60 drain the two replicas' pools of 3 ten times).
	loadRequests    = 60
	loadConcurrency = 10
	// loadDisruptRequests is the run during which serve is rolled out:
	// both replicas are replaced within it.
	loadDisruptRequests = 60
	// loadReplaceRequests is the run during which one serve pod is deleted
	// (10 s in) and replaced: about 90 s on a busy 2-CPU node.
	loadReplaceRequests = 30
	// loadClientTimeout is how long a client waits for one answer: the pool
	// wait (30 s), the snippet's timeout (10 s) and room for the rest. A
	// request still unanswered then has hung.
	loadClientTimeout = 60
	// settleDeadline is how long after the load the sandbox pods may take
	// to come back to the warm target.
	settleDeadline = 60 * time.Second
	// rssGrowthLimit bounds how much a serve replica may grow over the
	// load: the Go runtime keeps some heap it used, a leak grows with every
	// request.
	rssGrowthLimit = 32 << 20
)

// loadScript posts argv[2] executions of a print, argv[3] at a time, each on
// a new connection, to the service at argv[1] with the pod's token (read
// for each, as it rotates), and prints one JSON line per
// answer: its status, its error or sandbox id, and what the client saw when
// no HTTP answer came at all (refused, reset, timed out).
const loadScript = `import concurrent.futures, json, sys, time, urllib.error, urllib.request
import os
url, n, conc, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
def one(i):
    body = json.dumps({"code": "print(%d)" % i, "timeout_s": 10}).encode()
    with open(os.environ["SANDBOX_TOKEN_FILE"]) as f:
        auth = "Bearer " + f.read().strip()
    req = urllib.request.Request(url + "/v1/execute", data=body, headers={"Content-Type": "application/json", "Authorization": auth})
    out, t0 = {"i": i}, time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=limit) as r:
            b = json.loads(r.read())
            out.update(status=r.status, id=b.get("sandbox_id"), exit=b.get("exit_code"), stdout=b.get("stdout"))
    except urllib.error.HTTPError as e:
        raw = e.read()
        out.update(status=e.code, retry_after=e.headers.get("Retry-After"))
        try:
            out["error"] = json.loads(raw)["error"]
        except Exception:
            out["error"] = "not a JSON error: %r" % raw[:200]
    except Exception as e:
        out.update(status=0, error="%s: %s" % (type(e).__name__, e))
    out["ms"] = round((time.monotonic() - t0) * 1000)
    return out
with concurrent.futures.ThreadPoolExecutor(conc) as ex:
    for r in ex.map(one, range(n)):
        print(json.dumps(r), flush=True)
`

// loadReply is one line of loadScript.
type loadReply struct {
	I          int    `json:"i"`
	Status     int    `json:"status"`
	ID         string `json:"id"`
	Exit       int    `json:"exit"`
	Stdout     string `json:"stdout"`
	Error      string `json:"error"`
	RetryAfter string `json:"retry_after"`
	MS         int64  `json:"ms"`
}

// loadSummary is what a run of loadScript came to.
type loadSummary struct {
	results, busy int
	bad           []string // answers that are neither a result nor the documented 503
	dupIDs        []string
	p50, p90, max time.Duration
}

func (s loadSummary) String() string {
	return fmt.Sprintf("%d results, %d documented 503s, %d other; latency p50 %s, p90 %s, max %s",
		s.results, s.busy, len(s.bad), s.p50, s.p90, s.max)
}

// judgeLoad reads loadScript's output: every request must have a correct
// result or the documented 503 with Retry-After, and no two results may
// share a sandbox.
func judgeLoad(out string, n int) (loadSummary, error) {
	var s loadSummary
	seen := map[string]int{}
	var lat []time.Duration
	lines := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var r loadReply
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return s, fmt.Errorf("load client printed %q: %v", sc.Text(), err)
		}
		lines++
		lat = append(lat, time.Duration(r.MS)*time.Millisecond)
		switch {
		case r.Status == http.StatusOK && r.Exit == 0 && r.Stdout == strconv.Itoa(r.I)+"\n" && r.ID != "":
			s.results++
			if j, dup := seen[r.ID]; dup {
				s.dupIDs = append(s.dupIDs, fmt.Sprintf("%s (requests %d and %d)", r.ID, j, r.I))
			}
			seen[r.ID] = r.I
		case r.Status == http.StatusServiceUnavailable && r.RetryAfter != "" &&
			(r.Error == noCapacityMsg || strings.HasPrefix(r.Error, api.NotSealed)):
			// The documented 503s: no pod within the pool wait, or new
			// pods that could not prove their seal in time (a node too
			// busy for its NetworkPolicy engine to keep up: nothing ran).
			s.busy++
		default:
			s.bad = append(s.bad, fmt.Sprintf("request %d: status %d after %d ms: %s (id %q, exit %d, stdout %q)",
				r.I, r.Status, r.MS, r.Error, r.ID, r.Exit, r.Stdout))
		}
	}
	if lines != n {
		return s, fmt.Errorf("load client printed %d answers for %d requests", lines, n)
	}
	slices.Sort(lat)
	s.p50, s.p90, s.max = lat[len(lat)/2], lat[len(lat)*9/10], lat[len(lat)-1]
	return s, nil
}

type loadKey struct{}

// loadEnv is the client pod the load comes from, in a namespace of its own,
// so that it reaches serve through the Service as any agent would.
type loadEnv struct {
	client *corev1.Pod
	cs     kubernetes.Interface
	target poolSize // each replica's warm floor and bound
}

func withLoadClient(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
	if err := ServiceErr(ctx); err != nil {
		t.Fatal(err)
	}
	r := cfg.Client().Resources()
	base, _ := forwardToServe(ctx, t, cfg, podReady)
	pod := kindenv.WithToken(sleeperPod(kindenv.ClientNamespace, envconf.RandomName("load", 12), Suite(ctx).Image, nil))
	t.Cleanup(func() { _ = r.Delete(context.WithoutCancel(ctx), pod) })
	le := loadEnv{
		client: createReady(ctx, t, cfg, pod),
		cs:     clientset(ctx, t),
		target: poolTarget(ctx, t, base),
	}
	le.waitSettled(ctx, t)
	return context.WithValue(ctx, loadKey{}, le)
}

func loadOf(ctx context.Context) loadEnv { return ctx.Value(loadKey{}).(loadEnv) }

// run sends n executions from the client pod and returns its output.
func (le loadEnv) run(ctx context.Context, t *testing.T, cfg *envconf.Config, n int) string {
	t.Helper()
	url := fmt.Sprintf("http://%s.%s.svc:80", kindenv.Deployment, kindenv.Namespace)
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	start := time.Now()
	err := cfg.Client().Resources().ExecInPod(ctx, le.client.Namespace, le.client.Name, "main",
		[]string{"python3", "-c", loadScript, url, strconv.Itoa(n), strconv.Itoa(loadConcurrency), strconv.Itoa(loadClientTimeout)},
		&stdout, &stderr)
	if err != nil {
		t.Fatalf("load client: %v: %s", err, lastLine(stderr.String()))
	}
	t.Logf("%d executions at concurrency %d in %s", n, loadConcurrency, time.Since(start).Round(time.Second))
	return stdout.String()
}

// servePods lists the serve replicas that are not going away.
func (le loadEnv) servePods(ctx context.Context, t *testing.T) []corev1.Pod {
	t.Helper()
	all, err := servePods(ctx, le.cs)
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range all {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// waitSettled waits until every live serve replica is back at its warm
// floor (a target grown by the load has shrunk back) and no other sandbox
// pod exists: nothing claimed, nothing leaked.
func (le loadEnv) waitSettled(ctx context.Context, t *testing.T) {
	t.Helper()
	dep, err := le.cs.AppsV1().Deployments(kindenv.Namespace).Get(ctx, kindenv.Deployment, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	replicas := int(*dep.Spec.Replicas)
	var state string
	start := time.Now()
	err = wait.For(func(ctx context.Context) (bool, error) {
		serves := le.servePods(ctx, t)
		owners := map[string]bool{}
		for _, s := range serves {
			owners[kube.LabelValue(s.Name)] = podReady(s)
		}
		l, err := le.cs.CoreV1().Pods(kindenv.Namespace).List(ctx, metav1.ListOptions{LabelSelector: kube.RunnerSelector().String()})
		if err != nil {
			return false, err
		}
		warm, other := map[string]int{}, 0
		for _, p := range l.Items {
			o := p.Labels[kube.LabelOwner]
			if owners[o] && p.DeletionTimestamp == nil && !kube.IsClaimed(&p) && podReady(p) {
				warm[o]++
			} else {
				other++
			}
		}
		state = fmt.Sprintf("%d serve replicas %v, warm pods %v, %d other sandbox pods", len(serves), owners, warm, other)
		if len(serves) != replicas || other != 0 {
			return false, nil
		}
		for o := range owners {
			if warm[o] != le.target.floor {
				return false, nil
			}
		}
		return true, nil
	}, wait.WithContext(ctx), wait.WithTimeout(settleDeadline+2*time.Minute), wait.WithInterval(time.Second))
	if err != nil {
		t.Fatalf("the service did not settle: %s: %v", state, err)
	}
	t.Logf("settled in %s: %s", time.Since(start).Round(time.Second), state)
}

var rssMetric = regexp.MustCompile(`(?m)^process_resident_memory_bytes ([0-9.e+]+)$`)

// serveRSS reads each live serve replica's resident memory from its own
// /metrics (a port-forward to that pod, not the Service).
func (le loadEnv) serveRSS(ctx context.Context, t *testing.T, cfg *envconf.Config) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, p := range le.servePods(ctx, t) {
		name := p.Name
		base, _ := forwardToServe(ctx, t, cfg, func(q corev1.Pod) bool { return q.Name == name })
		r, err := get(ctx, base+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		m := rssMetric.FindStringSubmatch(r)
		if m == nil {
			t.Fatalf("serve %s: no process_resident_memory_bytes in /metrics", name)
		}
		f, _ := strconv.ParseFloat(m[1], 64)
		out[name] = int64(f)
	}
	return out
}

func get(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	return b.String(), err
}

// TestLoad: the pool of each replica is small, so most of this load waits
// for pods. Every request must still get an answer through the Service: a
// result, or the documented 503 after the pool wait. An empty pool that
// took serve out of its Service would show as refused connections here.
func TestLoad(t *testing.T) {
	f := features.New(fmt.Sprintf("%d executions at concurrency %d through the Service", loadRequests, loadConcurrency)).
		WithLabel("needs", "service").
		Setup(withLoadClient).
		Assess("every request answered, no sandbox shared, nothing leaked, memory flat", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			le := loadOf(ctx)
			before := le.serveRSS(ctx, t, cfg)
			s, err := judgeLoad(le.run(ctx, t, cfg, loadRequests), loadRequests)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("load: %s", s)
			for _, b := range s.bad {
				t.Error(b)
			}
			if len(s.dupIDs) > 0 {
				t.Errorf("sandboxes used twice: %v", s.dupIDs)
			}
			if s.results < loadRequests/2 {
				t.Errorf("only %d of %d requests got a result", s.results, loadRequests)
			}
			le.waitSettled(ctx, t)
			after := le.serveRSS(ctx, t, cfg)
			for name, b := range before {
				a, ok := after[name]
				if !ok {
					t.Errorf("serve %s is gone after the load", name)
					continue
				}
				t.Logf("serve %s: RSS %d MiB before, %d MiB after", name, b>>20, a>>20)
				if a-b > rssGrowthLimit {
					t.Errorf("serve %s grew by %d MiB over the load (limit %d MiB)", name, (a-b)>>20, rssGrowthLimit>>20)
				}
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// judgeDisruption judges a load run of n requests beside a fault (what):
// every answer a result or a documented 503, some results, no sandbox used
// twice.
func judgeDisruption(t *testing.T, out string, n int, what string) {
	t.Helper()
	s, err := judgeLoad(out, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s", what, s)
	// Some must run: a 503 for every request is an outage, not a fault survived.
	if s.results < n/4 {
		t.Errorf("only %d of %d requests got a result", s.results, n)
	}
	for _, b := range s.bad {
		t.Error(b)
	}
	if len(s.dupIDs) > 0 {
		t.Errorf("sandboxes used twice: %v", s.dupIDs)
	}
}

// TestLoadWhileServeIsReplaced: a serve replica is deleted (gracefully, as
// a rollout or a drain does) while the load runs. Clients may see results
// and documented 503s, never a refused or reset connection or a hang, and
// once the replacement settles no sandbox pod is left over.
func TestLoadWhileServeIsReplaced(t *testing.T) {
	f := features.New("load through the Service while a serve replica is deleted").
		WithLabel("needs", "service").
		Setup(withLoadClient).
		Assess("answers, not hangs; no pods leak", func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			le := loadOf(ctx)
			victim := le.servePods(ctx, t)[0]
			var wg sync.WaitGroup
			var delErr error
			wg.Go(func() {
				select {
				case <-time.After(10 * time.Second):
				case <-ctx.Done():
					return
				}
				delErr = le.cs.CoreV1().Pods(kindenv.Namespace).Delete(ctx, victim.Name, metav1.DeleteOptions{})
			})
			out := le.run(ctx, t, cfg, loadReplaceRequests)
			wg.Wait()
			if delErr != nil {
				t.Fatalf("delete serve %s: %v", victim.Name, delErr)
			}
			judgeDisruption(t, out, loadReplaceRequests, fmt.Sprintf("load with serve %s deleted 10 s in", victim.Name))
			le.waitSettled(ctx, t)
			for _, p := range le.servePods(ctx, t) {
				if p.UID == victim.UID {
					t.Errorf("serve %s is still there", victim.Name)
				}
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
