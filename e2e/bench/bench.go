// Package bench measures the sandbox service on the kind cluster, every
// figure in one run, side by side: the floor (a bare python3 started in a
// pod), warm executions at concurrency 1, 3 and 10, a data agent's snippet
// and print(1) with serve's preload and without, `kubectl run` of the same
// snippet, the local backend, the pool's refill beside bare pods'
// create-to-Ready and start rates (a batch, and a churn that deletes each
// as it gets Ready), a burst on an idle pool, a steady overload, and serve's
// peak memory. `make bench-kind` runs it through
// cmd/sandbox-bench.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/sandboxd/sandbox/e2e/kindenv"
	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/pool"
)

// Options say what to measure against and where the results go.
type Options struct {
	Env    *kindenv.Env // attached to the cluster: Kubeconfig, Kubectl, Image set
	Out    string       // directory for the raw samples and the picture
	Log    io.Writer    // progress
	Stdout io.Writer    // the table

	// How much of each; zero values take the defaults below.
	FloorRuns     int
	Rounds        map[int]int // concurrency -> rounds on a full pool
	KubectlRuns   int
	LocalRuns     int
	BarePods      int // created one at a time
	BareBatch     int // created at once, for the start rate
	Burst         int
	BurstConc     int
	Overload      time.Duration
	OverloadConc  int
	OverloadSkip  time.Duration // the start of the overload, left out of its rate
	PartsPods     int           // pods a rung a round in "pod parts"
	PartsRounds   int
	KeepNamespace bool
	// Phases, when set, runs only the phases of these names (see Run for
	// them); the table then has only their rows. "pod parts" runs only when
	// named here.
	Phases []string
	// Compare, when set, adds the phase "compare": the warm path under each
	// of its values, side by side.
	Compare Compare
	// CompareOverload, when set, adds to each turn of the comparison an
	// overload of that length (OverloadConc in flight), for the executions
	// per second under each value.
	CompareOverload time.Duration
}

// Compare names one of serve's environment variables, or NodeWeights, and
// the values to compare it at.
type Compare struct {
	Name   string
	Values []string
}

// ParseCompare reads NAME=V1,V2[,...].
func ParseCompare(s string) (Compare, error) {
	name, vals, ok := strings.Cut(s, "=")
	values := strings.Split(vals, ",")
	if !ok || name == "" || len(values) < 2 || slices.Contains(values, "") {
		return Compare{}, fmt.Errorf("compare %q: want NAME=VALUE,VALUE[,...], two values at least", s)
	}
	return Compare{Name: name, Values: values}, nil
}

// ParseRounds reads C=N[,C=N...]: N rounds at concurrency C, for the warm
// phase (in place of its default concurrencies).
func ParseRounds(s string) (map[int]int, error) {
	rounds := map[int]int{}
	for part := range strings.SplitSeq(s, ",") {
		c, n, ok := strings.Cut(part, "=")
		ci, cerr := strconv.Atoi(c)
		ni, nerr := strconv.Atoi(n)
		if !ok || cerr != nil || nerr != nil || ci < 1 || ni < 1 {
			return nil, fmt.Errorf("rounds %q: want CONCURRENCY=ROUNDS[,...], both whole numbers above 0 (for example 1=40,3=100)", s)
		}
		if _, dup := rounds[ci]; dup {
			return nil, fmt.Errorf("rounds %q: concurrency %d given twice", s, ci)
		}
		rounds[ci] = ni
	}
	return rounds, nil
}

func (o *Options) defaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.FloorRuns, 50)
	if o.Rounds == nil {
		o.Rounds = map[int]int{1: 40, 3: 20, 10: 10}
	}
	def(&o.KubectlRuns, 5)
	def(&o.LocalRuns, 50)
	def(&o.BarePods, 10)
	def(&o.BareBatch, 24)
	def(&o.Burst, 30)
	def(&o.BurstConc, 10)
	def(&o.OverloadConc, 24)
	def(&o.PartsPods, 5)
	def(&o.PartsRounds, 3)
	if o.Overload == 0 {
		o.Overload = 90 * time.Second
	}
	if o.OverloadSkip == 0 {
		o.OverloadSkip = 20 * time.Second
	}
}

// Deadlines of the waits between phases.
const (
	// idleDeadline: after load, a grown target holds for 30 s, then follows
	// the decaying claim rate down; the pools are back at their floor well
	// within this.
	idleDeadline = 4 * time.Minute
	// idleHold: the pools must stay at their floor this long to count as
	// idle (a target still above it would have created more by then).
	idleHold = 3 * time.Second
	// fullDeadline: every pool has its floor of warm pods again.
	fullDeadline = 2 * time.Minute
)

// Bench is one run.
type Bench struct {
	o       Options
	cs      kubernetes.Interface
	ns      string // the bench's own namespace
	client  string // the client pod
	url     string // the Service, as a client in the cluster reaches it
	image   string
	floor   int
	max     int
	serves  []corev1.Pod // the serve replicas
	owners  []string     // their owner label values
	sandbox *tracker     // the sandbox pods
	samples []Sample
	rows    []Row
	meta    map[string]string
	rest    cpuRest // what the machine keeps busy at rest (restCPU); zero until measured
}

// Run measures everything and prints the table; the raw samples go to
// Out/bench-kind.json and the latency distributions to Out/bench-kind.png.
func Run(ctx context.Context, o Options) (err error) {
	o.defaults()
	b := &Bench{o: o, image: o.Env.Image, meta: map[string]string{}}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Env.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", o.Env.Kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 100, 200 // the bare pods are created at once
	if b.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	b.url = fmt.Sprintf("http://%s.%s.svc:80", kindenv.Deployment, kindenv.Namespace)

	// A fresh start of serve, so that its peak memory is this run's.
	if err := o.Env.Restart(ctx, 3*time.Minute); err != nil {
		return err
	}
	if err := b.readDeployment(ctx); err != nil {
		return err
	}
	if err := b.setUp(ctx); err != nil {
		return err
	}
	defer b.tearDown(ctx)

	phases := []phase{
		{"floor", b.measureFloor},
		{"warm", b.measureWarm},
		{"compare", b.measureCompare},
		{"data", b.measureData},
		{"kubectl run", b.measureKubectlRun},
		{"local backend", b.measureLocal},
		{"bare pods", b.measureBarePods},
		{"bare churn", b.measureBareChurn},
		{"sandbox churn", b.measureSandboxChurn},
		{"burst", b.measureBurst},
		{"overload", b.measureOverload},
		{"serve memory", b.measureMemory},
		{"target moves", b.measureTargetMoves},
		{"pod parts", b.measurePodParts},
	}
	for _, name := range o.Phases {
		if !slices.ContainsFunc(phases, func(p phase) bool { return p.name == name }) {
			return fmt.Errorf("no phase %q (the phases: %s)", name, phaseNames(phases))
		}
	}
	start := time.Now()
	for _, p := range phases {
		named := slices.Contains(o.Phases, p.name)
		if len(o.Phases) > 0 && !named || p.name == "compare" && o.Compare.Name == "" || p.name == "pod parts" && !named {
			continue
		}
		t := time.Now()
		b.logf("=== %s", p.name)
		if err := p.run(ctx); err != nil {
			if ctx.Err() != nil {
				return err
			}
			// One phase's failure is a row saying so; the others still
			// measure.
			b.logf("=== %s FAILED: %v", p.name, err)
			b.rows = append(b.rows, Row{What: p.name, Note: "FAILED: " + clip(err.Error(), 160)})
			continue
		}
		b.logf("=== %s done in %s", p.name, time.Since(t).Round(time.Second))
	}
	b.meta["duration"] = time.Since(start).Round(time.Second).String()
	return b.report()
}

type phase struct {
	name string
	run  func(context.Context) error
}

func phaseNames(ps []phase) string {
	var names []string
	for _, p := range ps {
		names = append(names, strconv.Quote(p.name))
	}
	return strings.Join(names, ", ")
}

func (b *Bench) logf(format string, args ...any) {
	fmt.Fprintf(b.o.Log, "%s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}

func (b *Bench) kubectl(ctx context.Context, args ...string) (string, error) {
	return b.o.Env.Kubectl.Run(ctx, nil, args...)
}

// readDeployment learns the pools' floor and bound and the replicas.
func (b *Bench) readDeployment(ctx context.Context) error {
	d, err := b.cs.AppsV1().Deployments(kindenv.Namespace).Get(ctx, kindenv.Deployment, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the sandbox Deployment: %w", err)
	}
	env := deploymentEnv(d)
	if b.floor, err = strconv.Atoi(env["SANDBOX_POOL_SIZE"]); err != nil || b.floor < 1 {
		return fmt.Errorf("SANDBOX_POOL_SIZE %q in the Deployment", env["SANDBOX_POOL_SIZE"])
	}
	b.max = pool.DefaultMaxFactor * b.floor
	if v := env["SANDBOX_POOL_MAX"]; v != "" {
		if b.max, err = strconv.Atoi(v); err != nil {
			return fmt.Errorf("SANDBOX_POOL_MAX %q in the Deployment", v)
		}
	}
	b.meta["replicas"] = strconv.Itoa(int(*d.Spec.Replicas))
	b.meta["pool"] = fmt.Sprintf("floor %d, max %d per replica", b.floor, b.max)
	b.meta["pod cpu request"] = env["SANDBOX_POD_CPU_REQUEST"]
	return nil
}

func deploymentEnv(d *appsv1.Deployment) map[string]string {
	env := map[string]string{}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name != "serve" {
			continue
		}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
	}
	return env
}

// setUp makes the bench's namespace and client pod and starts watching the
// sandbox pods.
func (b *Bench) setUp(ctx context.Context) error {
	// The namespace the suite's caller policy grants; the rig makes it,
	// and a bench leaves it (without its pods) for the next.
	b.ns = kindenv.BenchNamespace
	_, err := b.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: b.ns, Labels: kindenv.ClientLabels()}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace: %w", err)
	}
	// A container that fails to start is made again: on this busy cgroup v1
	// node runc now and then fails a start ("unable to freeze"), and the
	// client's pod never restarts.
	var p *corev1.Pod
	for attempt := 1; ; attempt++ {
		pod := clientPod(b.ns, b.image)
		pod.Name = fmt.Sprintf("%s-%d", pod.Name, attempt)
		if p, err = b.cs.CoreV1().Pods(b.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create the client pod: %w", err)
		}
		b.client = p.Name
		if err = b.waitPodReady(ctx, b.client, 3*time.Minute); err == nil || !errors.Is(err, errNeverStarted) || attempt == clientAttempts {
			break
		}
		b.logf("client pod: %v; making another", err)
	}
	if err != nil {
		return err
	}
	if b.sandbox, err = newTracker(ctx, b.cs, kindenv.Namespace, poolPods()); err != nil {
		return err
	}
	if err := b.findServes(ctx); err != nil {
		return err
	}
	b.meta["node"] = p.Spec.NodeName
	return b.waitIdle(ctx)
}

func (b *Bench) tearDown(ctx context.Context) {
	if b.sandbox != nil {
		b.sandbox.stop()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	// The sandbox churn's and pod parts' copies live in serve's namespace:
	// a phase that failed or was stopped may have left some.
	if err := b.cs.CoreV1().Pods(kindenv.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)},
		metav1.ListOptions{LabelSelector: kube.OwnerSelector(churnOwner).String()}); err != nil {
		b.logf("delete the copies of pool pods: %v", err)
	}
	if b.o.KeepNamespace {
		return
	}
	if err := b.cs.CoreV1().Pods(b.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
		b.logf("delete the pods of namespace %s: %v", b.ns, err)
	}
}

// clientAttempts bounds how many client pods setUp makes.
const clientAttempts = 3

// errNeverStarted: the pod's container never started (kube.NeverStarted),
// and will not be restarted.
var errNeverStarted = errors.New("its container never started")

func (b *Bench) waitPodReady(ctx context.Context, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		p, err := b.cs.CoreV1().Pods(b.ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning && kube.IsReady(p) {
			return nil
		}
		if err == nil && kube.NeverStarted(p) {
			return fmt.Errorf("%s: %w", name, errNeverStarted)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pod %s not Ready within %s (%v)", name, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// findServes lists the Ready serve replicas.
func (b *Bench) findServes(ctx context.Context) error {
	l, err := b.cs.CoreV1().Pods(kindenv.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=server"})
	if err != nil {
		return err
	}
	b.serves, b.owners = nil, nil
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil && kube.IsReady(&p) {
			b.serves = append(b.serves, p)
			b.owners = append(b.owners, kube.LabelValue(p.Name))
		}
	}
	if len(b.serves) == 0 {
		return errors.New("no Ready serve replica")
	}
	return nil
}

// waitIdle waits until every replica's pool is at its floor, warm, with
// nothing more: any grown target has shrunk back.
func (b *Bench) waitIdle(ctx context.Context) error {
	var since time.Time
	_, err := b.sandbox.waitUntil(ctx, idleDeadline, "idle pools at their floor", func() bool {
		for _, o := range b.owners {
			if warm, live := b.sandbox.counts(o); warm != b.floor || live != b.floor {
				since = time.Time{}
				return false
			}
		}
		if since.IsZero() {
			since = time.Now()
		}
		return time.Since(since) >= idleHold
	})
	return err
}

// waitFull waits until every replica has at least its floor of warm pods.
func (b *Bench) waitFull(ctx context.Context) error {
	_, err := b.sandbox.waitUntil(ctx, fullDeadline, "every pool warm", func() bool {
		for _, o := range b.owners {
			if warm, _ := b.sandbox.counts(o); warm < b.floor {
				return false
			}
		}
		return true
	})
	return err
}

// measureFloor times bare python3 -c 'print(1)' in the client pod: the same
// image, the same node, timed inside the pod from spawn to exit.
func (b *Bench) measureFloor(ctx context.Context) error {
	s, err := b.runClient(ctx, "floor", "floor", strconv.Itoa(b.o.FloorRuns))
	if err != nil {
		return err
	}
	b.samples = append(b.samples, s...)
	b.rows = append(b.rows, Row{What: "floor: python3 -c 'print(1)' in a pod", MS: latencies(s, true),
		Note: "same image and node, spawn to exit, timed in the pod" + failures(s)})
	return nil
}

// measureWarm sends rounds of c requests at once through the Service, each
// round on full pools (every replica has its floor of warm pods). The rate
// is a round's c over its wall time: what a warm pool serves a burst of c
// at. At concurrency 1 each round also gives a refill time: from the
// request to a new Ready pod of the replica that ran it.
func (b *Bench) measureWarm(ctx context.Context) error {
	since := time.Now()
	var refills []float64
	var warm []Sample // every round's, for the pods' own account of their start
	for _, c := range slices.Sorted(maps.Keys(b.o.Rounds)) {
		phase := fmt.Sprintf("warm c%d", c)
		var all []Sample
		var rates []float64
		var rest cpuRest
		var mark cpuMark
		if c == 1 {
			var err error
			if rest, err = b.restCPU(ctx); err != nil {
				return err
			}
			if mark, err = markCPU(); err != nil {
				return err
			}
		}
		for range b.o.Rounds[c] {
			if err := b.waitFull(ctx); err != nil {
				return err
			}
			s, err := b.load(ctx, phase, b.url, c, c)
			if err != nil {
				return err
			}
			all = append(all, s...)
			if r := roundRate(s); r > 0 {
				rates = append(rates, r)
			}
			if c == 1 && len(s) == 1 && s[0].OK {
				if ms, err := b.refill(ctx, s[0]); err == nil {
					refills = append(refills, ms)
					b.samples = append(b.samples, Sample{Phase: "refill", MS: ms, ID: s[0].ID, OK: true})
				} else {
					b.logf("refill after %s: %v", s[0].ID, err)
				}
			}
		}
		b.samples = append(b.samples, all...)
		warm = append(warm, all...)
		b.rows = append(b.rows, Row{What: fmt.Sprintf("warm /v1/execute, concurrency %d", c), MS: latencies(all, false),
			Rate: fmt.Sprintf("%.1f exec/s", Percentile(rates, 50)),
			Note: fmt.Sprintf("%d rounds of %d at once on full pools, via the Service; rate: median round", b.o.Rounds[c], c) + failures(all)})
		if c == 1 {
			b.rows = append(b.rows, Breakdown(all)...)
			// Each execution's pod is deleted and replaced: that is in the cost.
			if err := b.waitFull(ctx); err != nil {
				return err
			}
			cost, err := mark.costAfter(ctx, rest, settle)
			if err != nil {
				return err
			}
			b.rows = append(b.rows, cpuRow("node CPU per warm execution, concurrency 1", cost, len(all), rest,
				"over the rounds and their refills"))
		}
	}
	b.rows = append(b.rows,
		Row{What: "pool refill: request to a new Ready pod", MS: refills, Note: "per concurrency-1 round, the replica that ran it"},
		Row{What: "sandbox pod create to Ready", MS: b.sandbox.startups(since), Note: "the pools' pods during the warm rounds, as a watch sees them"})
	b.rows = append(b.rows, PodStartup(warm)...)
	return nil
}

// The comparison of settings: how many times each is set, and
// the rounds at each concurrency every time.
const compareTurns = 2

var compareRounds = map[int]int{1: 15, 3: 8}

// measureCompare compares the warm path under each value of one of serve's
// environment variables, or of the node's CPU weights (Options.Compare), in
// turns, so that every value sees the same machine: each set afresh (serve
// rolled out), then rounds of 1 and of 3 on full pools. It leaves the
// setting as it found it.
func (b *Bench) measureCompare(ctx context.Context) error {
	name, values := b.o.Compare.Name, b.o.Compare.Values
	var set func(context.Context, string) error
	var restore func(context.Context) error
	if name == NodeWeights {
		var err error
		if set, restore, err = b.nodeWeightsSetter(ctx, values); err != nil {
			return err
		}
	} else {
		set, restore = b.serveEnvSetter(ctx, name)
	}
	defer func() {
		if err := restore(context.WithoutCancel(ctx)); err != nil {
			b.logf("restore %s: %v", name, err)
		}
	}()
	type key struct {
		value string
		c     int
	}
	got := map[key][]Sample{}
	overloads := map[string][]Sample{}
	rates := map[string][]string{}
	for range compareTurns {
		for _, v := range values {
			if err := set(ctx, v); err != nil {
				return err
			}
			if d := b.o.CompareOverload; d > 0 {
				if err := b.waitIdle(ctx); err != nil {
					return err
				}
				start := time.Now()
				s, err := b.overload(ctx, fmt.Sprintf("%s=%s overload", name, v), d)
				if err != nil {
					return err
				}
				rate, _, _, err := overloadRate(s, start, b.o.OverloadSkip)
				if err != nil {
					return err
				}
				overloads[v] = append(overloads[v], s...)
				rates[v] = append(rates[v], fmt.Sprintf("%.2f", rate))
			}
			for _, c := range slices.Sorted(maps.Keys(compareRounds)) {
				for range compareRounds[c] {
					if err := b.waitFull(ctx); err != nil {
						return err
					}
					s, err := b.load(ctx, fmt.Sprintf("%s=%s c%d", name, v, c), b.url, c, c)
					if err != nil {
						return err
					}
					got[key{v, c}] = append(got[key{v, c}], s...)
				}
			}
		}
	}
	for _, c := range slices.Sorted(maps.Keys(compareRounds)) {
		for _, v := range values {
			s := got[key{v, c}]
			b.samples = append(b.samples, s...)
			b.rows = append(b.rows,
				Row{What: fmt.Sprintf("%s=%s, concurrency %d", name, v, c), MS: latencies(s, false),
					Note: fmt.Sprintf("%d rounds, in turns with the other values", compareTurns*compareRounds[c]) + failures(s)},
				Row{What: "  part: the snippet's run (duration_ms)", MS: timings(s, "run")})
		}
	}
	for _, v := range values {
		if s := overloads[v]; len(s) > 0 {
			b.samples = append(b.samples, s...)
			b.rows = append(b.rows, Row{What: fmt.Sprintf("%s=%s, overload of %d in flight", name, v, b.o.OverloadConc), MS: latencies(s, false),
				Rate: strings.Join(rates[v], ", ") + " exec/s",
				Note: fmt.Sprintf("%s each turn, in turns with the other values; rate after its first %s, per turn", b.o.CompareOverload, b.o.OverloadSkip) + failures(s)})
			b.rows = append(b.rows, PodStartup(s)...)
		}
	}
	return nil
}

// serveEnvSetter returns the comparison's setter for one of serve's
// environment variables, and the restore of its value before.
func (b *Bench) serveEnvSetter(ctx context.Context, name string) (set func(context.Context, string) error, restore func(context.Context) error) {
	before, was := deploymentEnvOf(ctx, b)[name]
	set = func(ctx context.Context, v string) error { return b.setServeEnv(ctx, name+"="+v) }
	restore = func(ctx context.Context) error {
		if was {
			return b.setServeEnv(ctx, name+"="+before)
		}
		return b.setServeEnv(ctx, name+"-")
	}
	return set, restore
}

// deploymentEnvOf is serve's environment in the Deployment now (empty when
// it cannot be read).
func deploymentEnvOf(ctx context.Context, b *Bench) map[string]string {
	d, err := b.cs.AppsV1().Deployments(kindenv.Namespace).Get(ctx, kindenv.Deployment, metav1.GetOptions{})
	if err != nil {
		return map[string]string{}
	}
	return deploymentEnv(d)
}

// setServeEnv sets (NAME=VALUE) or removes (NAME-) an environment variable
// of serve, waits for the rollout and for the new replicas' pools to idle
// at their floor.
func (b *Bench) setServeEnv(ctx context.Context, assignment string) error {
	if _, err := b.kubectl(ctx, "-n", kindenv.Namespace, "set", "env", "deployment/"+kindenv.Deployment, "-c", "serve", assignment); err != nil {
		return err
	}
	if err := b.o.Env.RolloutStatus(ctx, 5*time.Minute); err != nil {
		return err
	}
	if err := b.findServes(ctx); err != nil {
		return err
	}
	return b.waitIdle(ctx)
}

// refill waits for the first pod of the replica that ran s made after s
// was sent to be Ready, and returns that time since s was sent, in ms.
// The pool starts the replacement as it claims, before the job runs.
func (b *Bench) refill(ctx context.Context, s Sample) (float64, error) {
	used, ok := b.sandbox.get(s.ID)
	if !ok {
		return 0, fmt.Errorf("the watch never saw pod %s", s.ID)
	}
	sent := unixTime(s.Sent)
	var readyAt time.Time
	_, err := b.sandbox.waitUntil(ctx, time.Minute, "a replacement of "+s.ID, func() bool {
		for name, p := range b.sandbox.pods {
			if name != s.ID && p.owner == used.owner && p.added.After(sent) && !p.ready.IsZero() {
				readyAt = p.ready
				return true
			}
		}
		return false
	})
	if err != nil {
		return 0, err
	}
	return float64(readyAt.Sub(sent).Microseconds()) / 1000, nil
}

// measureKubectlRun times what a user does without the service: kubectl run
// --rm -i of the same snippet, from the bench's host.
func (b *Bench) measureKubectlRun(ctx context.Context) error {
	var s []Sample
	for i := range b.o.KubectlRuns {
		start := time.Now()
		out, err := b.kubectl(ctx, "-n", b.ns, "run", fmt.Sprintf("bench-run-%d", i), "--rm", "-i", "--quiet",
			"--restart=Never", "--image="+b.image, "--image-pull-policy=IfNotPresent", "--command", "--", "python3", "-c", "print(1)")
		x := Sample{Phase: "kubectl run", MS: float64(time.Since(start).Microseconds()) / 1000, OK: err == nil && strings.Contains(out, "1")}
		if err != nil {
			x.Error = clip(err.Error(), 200)
		}
		s = append(s, x)
	}
	b.samples = append(b.samples, s...)
	b.rows = append(b.rows, Row{What: "kubectl run --rm -i --restart=Never", MS: latencies(s, true), Note: "same image and snippet, from the host" + failures(s)})
	return nil
}

// measureLocal times the local backend, served in the client pod itself
// (so without the isolation a root host gives it: see its log there).
func (b *Bench) measureLocal(ctx context.Context) error {
	url := fmt.Sprintf("http://127.0.0.1:%d", localPort)
	if _, err := b.load(ctx, "local warm-up", url, 1, 1); err != nil {
		return err
	}
	s, err := b.load(ctx, "local", url, b.o.LocalRuns, 1)
	if err != nil {
		return err
	}
	b.samples = append(b.samples, s...)
	b.rows = append(b.rows, Row{What: "local backend /v1/execute, concurrency 1", MS: latencies(s, false),
		Note: "sandbox serve --backend local in the client pod (non-root: isolation auto)" + failures(s)})
	return nil
}

// measureOverload keeps OverloadConc requests in flight for Overload: more
// than the pools can meet, so that pod starts bound the rate. The rate
// leaves out the first OverloadSkip, while the targets grow.
func (b *Bench) measureOverload(ctx context.Context) error {
	rest, err := b.restCPU(ctx)
	if err != nil {
		return err
	}
	if err := b.waitIdle(ctx); err != nil {
		return err
	}
	mark, err := markCPU()
	if err != nil {
		return err
	}
	start := time.Now()
	s, err := b.overload(ctx, "overload", b.o.Overload)
	if err != nil {
		return err
	}
	cost, err := mark.costAfter(ctx, rest, settle)
	if err != nil {
		return err
	}
	b.samples = append(b.samples, s...)
	rate, span, busy, err := overloadRate(s, start, b.o.OverloadSkip)
	if err != nil {
		return err
	}
	b.meta["overload exec/s"] = fmt.Sprintf("%.2f", rate)
	started := b.sandbox.startups(start)
	note := fmt.Sprintf("%d in flight for %s; rate over the last %.0f s; 503s: %d", b.o.OverloadConc, b.o.Overload, span, busy)
	var shares []string
	for _, r := range []struct{ key, of string }{
		{"bare pods/s", "the bare pod start rate"}, {"bare churn pods/s", "the bare churn's"}, {"sandbox churn pods/s", "the sandbox churn's"},
	} {
		if raw, err := strconv.ParseFloat(b.meta[r.key], 64); err == nil && raw > 0 {
			shares = append(shares, fmt.Sprintf("%.0f%% of %s", 100*rate/raw, r.of))
		}
	}
	if len(shares) > 0 {
		note += "; " + strings.Join(shares, ", ")
	}
	b.rows = append(b.rows, Row{What: "sustained overload through the Service", MS: latencies(s, false),
		Rate: fmt.Sprintf("%.2f exec/s", rate), Note: note + failures(s)},
		Row{What: "sandbox pod create to Ready, under the overload", MS: started, Note: "as a watch sees them"})
	b.rows = append(b.rows, PodStartup(s)...)
	// Per pod started, as the churns' rows: the pods still warm at the end
	// were started and not used.
	b.rows = append(b.rows, cpuRow("node CPU per sandbox pod started under the overload", cost, len(started), rest,
		"from the overload's start until its last answer"))
	return nil
}

// overload keeps OverloadConc requests in flight through the Service for d.
func (b *Bench) overload(ctx context.Context, phase string, d time.Duration) ([]Sample, error) {
	s, err := b.runClient(ctx, phase, "for", b.url, strconv.FormatFloat(d.Seconds(), 'f', 0, 64), strconv.Itoa(b.o.OverloadConc))
	if b.sandbox != nil {
		b.sandbox.used(s)
	}
	return s, err
}

// overloadRate is an overload's correct answers per second after its first
// skip (the pools' warm pods drain then), over the seconds that counts,
// and how many answered 503.
func overloadRate(s []Sample, start time.Time, skip time.Duration) (rate, span float64, busy int, err error) {
	from := float64(start.Add(skip).UnixNano()) / 1e9
	to := from
	n := 0
	for _, x := range s {
		to = math.Max(to, x.Done)
		if x.Status == 503 {
			busy++
		}
		if x.OK && x.Done >= from {
			n++
		}
	}
	if to <= from {
		return 0, 0, busy, fmt.Errorf("no answer came after the first %s of the overload", skip)
	}
	return float64(n) / (to - from), to - from, busy, nil
}

// measureMemory reads each serve process's peak resident memory (VmHWM)
// since the restart at the start of this run.
func (b *Bench) measureMemory(ctx context.Context) error {
	var parts []string
	for _, p := range b.serves {
		out, err := b.kubectl(ctx, "-n", kindenv.Namespace, "exec", p.Name, "-c", "serve", "--", "cat", "/proc/1/status")
		if err != nil {
			return err
		}
		peak := procField(out, "VmHWM:")
		if peak == "" {
			return fmt.Errorf("serve %s: no VmHWM in /proc/1/status", p.Name)
		}
		kb, _ := strconv.Atoi(strings.Fields(peak)[0])
		parts = append(parts, fmt.Sprintf("%s %d MiB", p.Name, kb>>10))
		b.samples = append(b.samples, Sample{Phase: "serve peak memory KiB", MS: float64(kb), ID: p.Name, OK: true})
	}
	b.rows = append(b.rows, Row{What: "serve peak memory (VmHWM, this run)", Note: strings.Join(parts, ", ")})
	return nil
}

// measureTargetMoves reads why each replica's warm target moved during
// the run, from its /metrics (fetched from the client pod: serve's policy
// lets any pod in, and the API server's proxy is not a pod).
func (b *Bench) measureTargetMoves(ctx context.Context) error {
	args := []string{"-n", b.ns, "exec", b.client, "-c", "main", "--", "python3", "-c", clientScript, "metrics"}
	for _, p := range b.serves {
		args = append(args, "http://"+p.Status.PodIP+":8080")
	}
	out, err := b.kubectl(ctx, args...)
	if err != nil {
		return err
	}
	moves := map[string]float64{}
	for line := range strings.Lines(out) {
		rest, ok := strings.CutPrefix(line, `sandbox_pool_target_changes_total{reason="`)
		if !ok {
			continue
		}
		reason, v, _ := strings.Cut(rest, `"} `)
		f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
		moves[reason] += f
	}
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(moves)) {
		parts = append(parts, fmt.Sprintf("%s %.0f", r, moves[r]))
	}
	b.rows = append(b.rows, Row{What: "warm target moves, both replicas", Note: strings.Join(parts, ", ")})
	return nil
}

// report prints the table and writes the samples and the picture.
func (b *Bench) report() error {
	host, _ := os.Hostname()
	b.meta["date"] = time.Now().UTC().Format("2006-01-02 15:04 UTC")
	b.meta["host"] = host
	b.meta["machine"] = machine()
	fmt.Fprintf(b.o.Stdout, "\nsandbox on kind, %s, %s (%s); %s replicas, pools %s, pod CPU request %s\n\n",
		b.meta["date"], b.meta["machine"], host, b.meta["replicas"], b.meta["pool"], b.meta["pod cpu request"])
	if err := Table(b.o.Stdout, b.rows); err != nil {
		return err
	}
	if err := os.MkdirAll(b.o.Out, 0o755); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(map[string]any{"meta": b.meta, "samples": b.samples}, "", " ")
	if err != nil {
		return err
	}
	samples := filepath.Join(b.o.Out, "bench-kind.json")
	if err := os.WriteFile(samples, raw, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(b.o.Stdout, "\nraw samples: %s\n", samples)
	png := filepath.Join(b.o.Out, "bench-kind.png")
	switch err := drawLatencies(png, b.samples, b.meta["date"]+", "+b.meta["machine"]); {
	case errors.Is(err, errNothingToDraw):
		fmt.Fprintf(b.o.Stdout, "no latency picture: %v\n", err)
	case err != nil:
		return fmt.Errorf("draw %s: %w", png, err)
	default:
		fmt.Fprintf(b.o.Stdout, "latency distributions: %s\n", png)
	}
	return nil
}

// latencies lists the samples' times; only correct results when okOnly,
// else every answer (a 503 took its time too).
func latencies(s []Sample, okOnly bool) []float64 {
	var out []float64
	for _, x := range s {
		if !okOnly || x.OK {
			out = append(out, x.MS)
		}
	}
	return out
}

// failures says how many samples were not correct results, by status.
func failures(s []Sample) string {
	by := map[int]int{}
	for _, x := range s {
		if !x.OK {
			by[x.Status]++
		}
	}
	if len(by) == 0 {
		return ""
	}
	var parts []string
	for _, st := range slices.Sorted(maps.Keys(by)) {
		what := strconv.Itoa(st)
		if st == 0 {
			what = "no answer"
		}
		parts = append(parts, fmt.Sprintf("%s: %d", what, by[st]))
	}
	return "; NOT OK: " + strings.Join(parts, ", ")
}

// roundRate is a round's executions over its wall time (first send to last
// answer), per second.
func roundRate(s []Sample) float64 {
	if len(s) == 0 {
		return 0
	}
	first, last := math.Inf(1), 0.0
	ok := 0
	for _, x := range s {
		first, last = math.Min(first, x.Sent), math.Max(last, x.Done)
		if x.OK {
			ok++
		}
	}
	if last <= first {
		return 0
	}
	return float64(ok) / (last - first)
}

func unixTime(s float64) time.Time {
	sec, frac := math.Modf(s)
	return time.Unix(int64(sec), int64(frac*1e9))
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// procField returns the value of a "Name:\tvalue" line of a /proc file.
func procField(text, name string) string {
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(line, name); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// machine describes this host: CPU model and count, memory, kernel.
func machine() string {
	cpu, n := "", 0
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				n++
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if kb, err := strconv.Atoi(strings.Fields(procField(string(b), "MemTotal:") + " 0")[0]); err == nil {
			mem = fmt.Sprintf("%d GiB", (kb+(1<<19))>>20)
		}
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("%d × %s, %s, Linux %s", n, cpu, mem, strings.TrimSpace(string(kernel)))
}
