package bench

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/utils/ptr"

	"github.com/sandboxd/sandbox/e2e/kindenv"
	"github.com/sandboxd/sandbox/internal/kube"
)

// bareLabel marks the bench's bare pods.
var bareLabel = map[string]string{"app.kubernetes.io/name": "sandbox-bench-bare"}

// bareCPU is the bare pods' CPU request: small enough that a batch of them
// fits beside the idle pools on a 2-CPU node whatever the sandbox pods
// request. What a pod's start costs is the node's daemons' work, not the
// pod's own (python3 going to sleep), so its weight hardly matters.
const bareCPU = "10m"

// bareCommand is what a bare pod runs.
var bareCommand = []string{"python3", "-c", "import time; time.sleep(600)"}

// barePod is the least a pod can be with the sandbox image: python3
// sleeping, no probe (Ready as soon as it runs).
func barePod(ns, name, image string) *corev1.Pod {
	uid := int64(65532)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: bareLabel},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: &uid, RunAsGroup: &uid},
			Containers: []corev1.Container{{
				Name:            "bare",
				Image:           image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         bareCommand,
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse(bareCPU), corev1.ResourceMemory: resource.MustParse("32Mi"),
				}},
			}},
		},
	}
}

// measureBarePods times bare pods from the create call to the watch showing
// them Ready: BarePods one at a time (latency), then BareBatch at once (the
// cluster's raw pod start rate: the batch over the time to its last Ready).
// The pools are idle meanwhile, so nothing else starts pods.
func (b *Bench) measureBarePods(ctx context.Context) error {
	tr, err := b.bareTracker(ctx)
	if err != nil {
		return err
	}
	defer tr.stop()

	var one []float64
	failed := 0 // pods that never started, left out of the times and the rate
	for i := range b.o.BarePods {
		name := fmt.Sprintf("bench-bare-%d", i)
		at := time.Now()
		if _, err := b.cs.CoreV1().Pods(b.ns).Create(ctx, barePod(b.ns, name, b.image), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create %s: %w", name, err)
		}
		if err := tr.waitStarted(ctx, name); err != nil {
			return err
		}
		s, _ := tr.get(name)
		if s.failed {
			failed++
			b.deletePod(ctx, name)
			continue
		}
		ms := float64(s.ready.Sub(at).Microseconds()) / 1000
		one = append(one, ms)
		b.samples = append(b.samples, Sample{Phase: "bare pod", MS: ms, ID: name, OK: true})
		b.deletePod(ctx, name)
	}

	names := make([]string, b.o.BareBatch)
	created := make([]time.Time, b.o.BareBatch)
	errs := make([]error, b.o.BareBatch)
	// The batch's cost is its own: the pods above go first.
	if err := tr.waitGone(ctx); err != nil {
		return err
	}
	rest, err := b.restCPU(ctx)
	if err != nil {
		return err
	}
	mark, err := markCPU()
	if err != nil {
		return err
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range names {
		names[i] = fmt.Sprintf("bench-batch-%d", i)
		wg.Go(func() {
			created[i] = time.Now()
			_, errs[i] = b.cs.CoreV1().Pods(b.ns).Create(ctx, barePod(b.ns, names[i], b.image), metav1.CreateOptions{})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("create %s: %w", names[i], err)
		}
	}
	if _, err := tr.waitUntil(ctx, 5*time.Minute, "the batch Ready", func() bool {
		for _, n := range names {
			if s := tr.pods[n]; s == nil || s.ready.IsZero() && !s.failed {
				return false
			}
		}
		return true
	}); err != nil {
		return err
	}
	var batch []float64
	var last time.Time
	for i, n := range names {
		s, _ := tr.get(n)
		if s.failed {
			failed++
			continue
		}
		ms := float64(s.ready.Sub(created[i]).Microseconds()) / 1000
		batch = append(batch, ms)
		b.samples = append(b.samples, Sample{Phase: "bare pod in a batch", MS: ms, ID: n, OK: true})
		last = maxTime(last, s.ready)
	}
	rate := float64(len(batch)) / last.Sub(start).Seconds()
	b.meta["bare pods/s"] = fmt.Sprintf("%.2f", rate)
	for _, n := range names {
		b.deletePod(ctx, n)
	}
	// Gone before the next phase, which must not share the node's starts.
	if err := tr.waitGone(ctx); err != nil {
		return err
	}
	cost, err := mark.costAfter(ctx, rest, settle)
	if err != nil {
		return err
	}
	b.rows = append(b.rows,
		Row{What: "bare pod create to Ready, one at a time", MS: one, Note: "same image, CPU request " + bareCPU + ", no probe"},
		Row{What: fmt.Sprintf("bare pods, %d created at once", len(names)), MS: batch,
			Rate: fmt.Sprintf("%.2f pods/s", rate), Note: "the raw pod start rate: the batch over the time to its last Ready"})
	if failed > 0 {
		b.rows[len(b.rows)-1].Note += fmt.Sprintf("; %d bare pods (of both rows) failed to start and are left out", failed)
	}
	b.rows = append(b.rows, cpuRow("node CPU per bare pod, created and deleted", cost, len(names), rest,
		"from the batch's creation until its pods are gone"))
	return nil
}

// measureBareChurn keeps OverloadConc bare pods starting for Overload, each
// deleted as soon as it is Ready and replaced at once: what an overload
// asks of the node (every execution's pod started, then deleted), with
// nothing of the sandbox's own. Its rate after OverloadSkip, like the
// overload's, is the sustained raw start rate; the batch above leaves out
// the deletes.
func (b *Bench) measureBareChurn(ctx context.Context) error {
	tr, err := b.bareTracker(ctx)
	if err != nil {
		return err
	}
	defer tr.stop()
	rate, rows, err := b.churn(ctx, tr, b.ns, "bare pod", func(name string) *corev1.Pod { return barePod(b.ns, name, b.image) })
	if err != nil {
		return err
	}
	b.meta["bare churn pods/s"] = fmt.Sprintf("%.2f", rate)
	// The overload deletes each pod after its one use too, and its pods cost
	// no less than bare ones: this churn's share of the batch bounds the
	// overload's.
	if raw, err := strconv.ParseFloat(b.meta["bare pods/s"], 64); err == nil && raw > 0 {
		rows[0].Note += fmt.Sprintf("; %.0f%% of the bare pod start rate: a ceiling for the overload, which also deletes each pod after its one use", 100*rate/raw)
	}
	b.rows = append(b.rows, rows...)
	return nil
}

// churnOwner is the owner label of the sandbox churn's pods: no pool's, so
// that no serve hands them out, and the bench's watch of the pools leaves
// them out (see setUp).
const churnOwner = "sandbox-bench"

// measureSandboxChurn is the bare churn with sandbox pods: copies of one of
// the pools' own pods (the same image, runner and its flags, readiness
// probe, scratch volumes and security, in serve's namespace under its
// NetworkPolicies, so each proves its egress cut before it is Ready), but
// no pool's and never given a job. Between the bare churn and the overload
// it splits what an execution costs the node beyond a bare pod: the sandbox
// pod itself, and the rest (serve's bookkeeping, the job).
func (b *Bench) measureSandboxChurn(ctx context.Context) error {
	tmpl, err := b.poolPod(ctx)
	if err != nil {
		return err
	}
	tr, err := newTracker(ctx, b.cs, kindenv.Namespace, kube.OwnerSelector(churnOwner))
	if err != nil {
		return err
	}
	defer tr.stop()
	rate, rows, err := b.churn(ctx, tr, kindenv.Namespace, "sandbox pod", func(name string) *corev1.Pod { return fitted(sandboxPodLike(tmpl, name)) })
	if err != nil {
		return err
	}
	b.meta["sandbox churn pods/s"] = fmt.Sprintf("%.2f", rate)
	rows[0].Note += "; copies of a pool's pod, never given a job, requesting " + bareCPU + " of CPU as the bare pods do"
	b.rows = append(b.rows, rows...)
	return nil
}

// poolPods selects the pools' pods: every snippet pod but the sandbox
// churn's.
func poolPods() labels.Selector {
	churn, err := labels.NewRequirement(kube.LabelOwner, selection.NotEquals, []string{churnOwner})
	if err != nil {
		panic(err) // constant, valid label
	}
	return kube.RunnerSelector().Add(*churn)
}

// poolPod waits for the pools to idle, so that nothing else starts pods,
// and returns one of the pools' own pods, to copy.
func (b *Bench) poolPod(ctx context.Context) (*corev1.Pod, error) {
	if err := b.waitIdle(ctx); err != nil {
		return nil, err
	}
	pods, err := b.cs.CoreV1().Pods(kindenv.Namespace).List(ctx, metav1.ListOptions{LabelSelector: kube.RunnerSelector().String()})
	if err != nil {
		return nil, err
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; slices.Contains(b.owners, p.Labels[kube.LabelOwner]) {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no pool pod in %s to copy", kindenv.Namespace)
}

// fitted gives p the bare pods' CPU request. OverloadConc pods at the
// pools' request do not fit on a 2-CPU node beside the pools' floors and
// the bench's client: the last waits to be scheduled, and each of its
// tries is one more status write, which the bare churn does not pay.
// A request is a reservation and a weight, not work.
func fitted(p *corev1.Pod) *corev1.Pod {
	p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse(bareCPU)
	return p
}

// sandboxPodLike is tmpl's spec under a new name and the churn's owner: no
// owner reference, no incarnation, no claim, not yet on a node.
func sandboxPodLike(tmpl *corev1.Pod, name string) *corev1.Pod {
	l := maps.Clone(tmpl.Labels)
	delete(l, kube.LabelIncarnation)
	l[kube.LabelOwner] = churnOwner
	spec := tmpl.Spec.DeepCopy()
	spec.NodeName = ""
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tmpl.Namespace, Labels: l}, Spec: *spec}
}

// churn keeps OverloadConc pods of a kind, from newPod, starting in ns for
// Overload, each deleted as soon as tr sees it Ready and replaced at once, and
// returns their rate after OverloadSkip, a row of their create-to-Ready
// times and one of the node's CPU time per pod.
func (b *Bench) churn(ctx context.Context, tr *tracker, ns, kind string, newPod func(name string) *corev1.Pod) (float64, []Row, error) {
	rest, err := b.restCPU(ctx)
	if err != nil {
		return 0, nil, err
	}
	mark, err := markCPU()
	if err != nil {
		return 0, nil, err
	}
	start := time.Now()
	end := start.Add(b.o.Overload)
	var (
		mu      sync.Mutex
		s       []Sample
		failed  int
		firstEr error
		n       atomic.Int64
		wg      sync.WaitGroup
	)
	pods := b.cs.CoreV1().Pods(ns)
	for range b.o.OverloadConc {
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				name := fmt.Sprintf("bench-churn-%d", n.Add(1))
				at := time.Now()
				_, err := pods.Create(ctx, newPod(name), metav1.CreateOptions{})
				if err == nil {
					err = tr.waitStarted(ctx, name)
				}
				if err != nil {
					mu.Lock()
					firstEr = cmp.Or(firstEr, err)
					mu.Unlock()
					return
				}
				p, _ := tr.get(name)
				b.deletePodIn(ctx, ns, name)
				mu.Lock()
				if p.failed {
					failed++
				} else {
					s = append(s, Sample{Phase: kind + " churned", MS: float64(p.ready.Sub(at).Microseconds()) / 1000, ID: name, OK: true,
						Sent: float64(at.UnixNano()) / 1e9, Done: float64(p.ready.UnixNano()) / 1e9})
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	b.samples = append(b.samples, s...)
	// Gone before the next phase, which must not share the node's starts.
	if err := tr.waitGone(ctx); err != nil {
		return 0, nil, err
	}
	if firstEr != nil {
		return 0, nil, firstEr
	}
	cost, err := mark.costAfter(ctx, rest, settle)
	if err != nil {
		return 0, nil, err
	}
	rate, span, _, err := overloadRate(s, start, b.o.OverloadSkip)
	if err != nil {
		return 0, nil, err
	}
	note := fmt.Sprintf("%d starting at once for %s, each deleted once Ready; rate over the last %.0f s", b.o.OverloadConc, b.o.Overload, span)
	if failed > 0 {
		note += fmt.Sprintf("; %d never started and are left out", failed)
	}
	return rate, []Row{
		{What: kind + "s churned", MS: latencies(s, false), Rate: fmt.Sprintf("%.2f pods/s", rate), Note: note},
		cpuRow("node CPU per "+kind+" churned", cost, int(n.Load()), rest, "from the first create until the last pod is gone"),
	}, nil
}

// bareTracker waits for the pools to idle, so that nothing else starts
// pods, and watches the bare pods.
func (b *Bench) bareTracker(ctx context.Context) (*tracker, error) {
	if err := b.waitIdle(ctx); err != nil {
		return nil, err
	}
	return newTracker(ctx, b.cs, b.ns, labels.SelectorFromSet(bareLabel))
}

// waitStarted waits until the named pod is Ready or will never start.
func (tr *tracker) waitStarted(ctx context.Context, name string) error {
	_, err := tr.waitUntil(ctx, 2*time.Minute, name+" Ready", func() bool {
		s := tr.pods[name]
		return s != nil && (!s.ready.IsZero() || s.failed)
	})
	return err
}

func (b *Bench) deletePod(ctx context.Context, name string) { b.deletePodIn(ctx, b.ns, name) }

// deletePodIn deletes as serve does: no grace period.
func (b *Bench) deletePodIn(ctx context.Context, ns, name string) {
	if err := b.cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		b.logf("delete %s: %v", name, err)
	}
}

func maxTime(a, c time.Time) time.Time {
	if c.After(a) {
		return c
	}
	return a
}

// burstSettle is left after the pools are idle and before a burst: long
// enough for the floor's pods to have preloaded, yielding or not.
const burstSettle = 10 * time.Second

// measureBurst sends Burst requests BurstConc at a time through the Service
// to idle pools (each at its floor), as a burst of agents would, and
// records the largest pool each replica grew to: with the preload as
// deployed (yielding to a busy node unless told otherwise), with the
// preload taken at once whatever the node's load, and with none, in turns
// in one run. It leaves the settings as it found them.
func (b *Bench) measureBurst(ctx context.Context) error {
	_, restoreAlways := b.serveEnvSetter(ctx, preloadAlwaysEnv)
	_, restorePreload := b.serveEnvSetter(ctx, preloadEnv)
	defer func() {
		ctx := context.WithoutCancel(ctx)
		for _, restore := range []func(context.Context) error{restoreAlways, restorePreload} {
			if err := restore(ctx); err != nil {
				b.logf("restore serve's preload settings: %v", err)
			}
		}
	}()
	for _, st := range []struct{ name, assignment string }{
		{"preload as deployed", ""},
		{"preload at once, busy node or not", preloadAlwaysEnv + "=true"},
		{"no preload", preloadEnv + "="},
	} {
		phase := "burst" // the plot's, as deployed
		if st.assignment != "" {
			if err := b.setServeEnv(ctx, st.assignment); err != nil {
				return err
			}
			phase += ", " + st.name
		}
		if err := b.burst(ctx, phase, st.name); err != nil {
			return err
		}
	}
	return nil
}

// burst is one burst of measureBurst, its samples of phase and its row
// labelled with setting.
func (b *Bench) burst(ctx context.Context, phase, setting string) error {
	if err := b.waitIdle(ctx); err != nil {
		return err
	}
	time.Sleep(burstSettle)
	largest := map[string]int{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			b.sandbox.mu.Lock()
			for _, o := range b.owners {
				_, live := b.sandbox.counts(o)
				largest[o] = max(largest[o], live)
			}
			ch := b.sandbox.changed
			b.sandbox.mu.Unlock()
			select {
			case <-ch:
			case <-done:
				return
			}
		}
	})
	start := time.Now()
	s, err := b.load(ctx, phase, b.url, b.o.Burst, b.o.BurstConc)
	wall := time.Since(start)
	close(done)
	wg.Wait()
	if err != nil {
		return err
	}
	b.samples = append(b.samples, s...)
	busy, ok := 0, 0
	for _, x := range s {
		if x.Status == 503 {
			busy++
		}
		if x.OK {
			ok++
		}
	}
	b.rows = append(b.rows, Row{What: fmt.Sprintf("burst of %d at concurrency %d on idle pools, %s", b.o.Burst, b.o.BurstConc, setting),
		MS: latencies(s, false), Rate: fmt.Sprintf("%.1f exec/s", float64(ok)/wall.Seconds()),
		Note: fmt.Sprintf("503s: %d; %s in all (from the host); unclaimed pods at most %v", busy, wall.Round(100*time.Millisecond), largest) + failures(s)})
	return nil
}
