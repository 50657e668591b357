package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandboxd/sandbox/e2e/kindenv"
	"github.com/sandboxd/sandbox/internal/kube"
)

// What each part of a sandbox pod costs the node. The sandbox churn costs
// the node more per pod than the bare churn; the phase "pod parts" splits
// that up. It starts pods one at a time on a ladder
// from the bare pod to a copy of a pool's pod, each rung the one above it
// with one part taken out, and reads the node's CPU per pod on each rung.
// One at a time, so that no rung's figure depends on how well the node
// batches work under load; rungs in turn, round after round, so that the
// machine's drifting speed falls on all of them alike.

// partsLabel marks the phase's pods in the bench's namespace.
var partsLabel = map[string]string{"app.kubernetes.io/name": "sandbox-bench-parts"}

// refusedProbe is a seal probe every pod finds cut at once (nothing
// listens there), for the rungs outside serve's namespace: the runner
// proves its egress cut before it is Ready, and without a probe named it
// proves it against the API server, which no policy stops there.
const refusedProbe = "127.0.0.1:1"

// rung is one pod of the ladder.
type rung struct {
	what string
	ns   string
	pod  func(name string) *corev1.Pod
}

// podLadder builds the ladder from tmpl, one of the pools' pods: the first
// rung is a bare pod, the last the sandbox churn's copy at the pool's own
// CPU request (one pod at a time, it fits).
func podLadder(tmpl *corev1.Pod, benchNS string) []rung {
	full := sandboxPodLike(tmpl, "")

	// The runner, outside serve's namespace: no policies, no proof to wait for.
	runner := full.DeepCopy()
	runner.Namespace, runner.Labels = benchNS, maps.Clone(partsLabel)
	c := &runner.Spec.Containers[0]
	c.Args = append(withoutFlags(c.Args, "--seal-probe", "--seal-dns", "--seal-dns-name"), "--seal-probe", refusedProbe)

	// Without its readiness probe (Ready as soon as it runs) and deadline.
	noProbe := runner.DeepCopy()
	noProbe.Spec.Containers[0].ReadinessProbe = nil
	noProbe.Spec.ActiveDeadlineSeconds = nil

	// Without its own resolver: the cluster's DNS, no port sysctl.
	noResolver := noProbe.DeepCopy()
	c = &noResolver.Spec.Containers[0]
	c.Args = withoutFlags(c.Args, "--resolver")
	noResolver.Spec.DNSPolicy, noResolver.Spec.DNSConfig = "", nil
	noResolver.Spec.SecurityContext.Sysctls = nil

	// python3 sleeping in place of the runner, as in the bare pod.
	sleeper := noResolver.DeepCopy()
	c = &sleeper.Spec.Containers[0]
	c.Command, c.Args, c.Ports = bareCommand, nil, nil

	noScratch := sleeper.DeepCopy()
	c = &noScratch.Spec.Containers[0]
	noScratch.Spec.Volumes, c.VolumeMounts, c.Env = nil, nil, nil

	bare := barePod(benchNS, "", "")
	noLimits := noScratch.DeepCopy()
	noLimits.Spec.Containers[0].Resources = bare.Spec.Containers[0].Resources

	unrestricted := noLimits.DeepCopy()
	unrestricted.Spec.SecurityContext = bare.Spec.SecurityContext
	unrestricted.Spec.Containers[0].SecurityContext = nil

	named := func(p *corev1.Pod) func(string) *corev1.Pod {
		return func(name string) *corev1.Pod {
			q := p.DeepCopy()
			q.Name = name
			return q
		}
	}
	return []rung{
		{"bare: python3 sleeping as a non-root uid", benchNS, named(unrestricted)},
		{"+ restricted: seccomp, no capabilities, read-only root, fsGroup", benchNS, named(noLimits)},
		{"+ the snippet's limits (" + kube.SnippetCPU + " CPU, " + kube.SnippetMemory + ")", benchNS, named(noScratch)},
		{"+ two memory-backed scratch volumes", benchNS, named(sleeper)},
		{"+ the runner in place of python3 sleeping, its python3 waiting", benchNS, named(noResolver)},
		{"+ the runner's own resolver: no cluster DNS, the port sysctl", benchNS, named(noProbe)},
		{"+ its readiness probe and deadline", benchNS, named(runner)},
		{"+ serve's namespace, its policies, the egress proof", full.Namespace, named(full)},
	}
}

// withoutFlags drops the named flags and the value after each.
func withoutFlags(args []string, flags ...string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if slices.Contains(flags, args[i]) {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// measurePodParts starts PartsPods pods of each rung one at a time, rung
// after rung, for PartsRounds rounds, and gives each rung's CPU per pod:
// the median of its rounds, each round the node's busy time from the
// rung's first create until settle after its last pod is gone.
func (b *Bench) measurePodParts(ctx context.Context) error {
	tmpl, err := b.poolPod(ctx)
	if err != nil {
		return err
	}
	ladder := podLadder(tmpl, b.ns)
	trackers := map[string]*tracker{}
	for ns, sel := range map[string]labels.Selector{b.ns: labels.SelectorFromSet(partsLabel), kindenv.Namespace: kube.OwnerSelector(churnOwner)} {
		tr, err := newTracker(ctx, b.cs, ns, sel)
		if err != nil {
			return err
		}
		defer tr.stop()
		trackers[ns] = tr
	}
	rest, err := b.restCPU(ctx)
	if err != nil {
		return err
	}
	type result struct {
		ms    []float64
		cpu   []float64 // per pod, one per round
		by    map[string]float64
		span  cpuTimes
		pods  int
		fails int
	}
	res := make([]result, len(ladder))
	for round := range b.o.PartsRounds {
		for i, r := range ladder {
			tr := trackers[r.ns]
			mark, err := markCPU()
			if err != nil {
				return err
			}
			for k := range b.o.PartsPods {
				name := fmt.Sprintf("bench-part-%d-%d-%d", i, round, k)
				at := time.Now()
				if _, err := b.cs.CoreV1().Pods(r.ns).Create(ctx, r.pod(name), metav1.CreateOptions{}); err != nil {
					return fmt.Errorf("%s: %w", r.what, err)
				}
				if err := tr.waitStarted(ctx, name); err != nil {
					return fmt.Errorf("%s: %w", r.what, err)
				}
				p, _ := tr.get(name)
				b.deletePodIn(ctx, r.ns, name)
				if err := tr.waitGone(ctx); err != nil {
					return err
				}
				if p.failed {
					res[i].fails++
					continue
				}
				ms := float64(p.ready.Sub(at).Microseconds()) / 1000
				res[i].ms = append(res[i].ms, ms)
				b.samples = append(b.samples, Sample{Phase: "pod part " + r.what, MS: ms, ID: name, OK: true})
			}
			cost, err := mark.costAfter(ctx, rest, settle)
			if err != nil {
				return err
			}
			res[i].cpu = append(res[i].cpu, cost.total/float64(b.o.PartsPods))
			res[i].pods += b.o.PartsPods
			res[i].span = res[i].span.add(cost.span)
			if res[i].by == nil {
				res[i].by = map[string]float64{}
			}
			for k, v := range cost.by {
				res[i].by[k] += v
			}
		}
	}
	var below float64
	for i, r := range ladder {
		var rounds []string
		for _, v := range res[i].cpu {
			rounds = append(rounds, fmt.Sprintf("%.2f", v))
		}
		cpu := Percentile(res[i].cpu, 50) // sorts them: after the rounds' list
		var note string
		if i > 0 {
			note = fmt.Sprintf("%+.2f CPU-s on the rung below; ", cpu-below)
		} else {
			note = fmt.Sprintf("one pod at a time, create to Ready to gone, %d a rung a round, rungs in turn; CPU as the churns' rows, per pod, the median of %d rounds; ",
				b.o.PartsPods, b.o.PartsRounds)
		}
		note += fmt.Sprintf("rounds %s; by command: %s; %s", strings.Join(rounds, ", "), topCommands(res[i].by, 4, res[i].pods),
			cpuCost{span: res[i].span}.timesNote(res[i].pods))
		if res[i].fails > 0 {
			note += fmt.Sprintf("; %d never started and are left out", res[i].fails)
		}
		b.rows = append(b.rows, Row{What: "pod parts: " + r.what, MS: res[i].ms, Rate: fmt.Sprintf("%.2f CPU-s", cpu), Note: note})
		below = cpu
	}
	return nil
}
