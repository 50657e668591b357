package pool

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the pool's own; executions by outcome are the server's.
type metrics struct {
	ready         prometheus.Gauge
	target        prometheus.Gauge
	floor         prometheus.Gauge
	max           prometheus.Gauge
	targetChanges *prometheus.CounterVec
	claimRate     prometheus.Gauge
	startEstimate prometheus.Gauge
	recordErrors  prometheus.Counter
	claimWait     prometheus.Histogram
	podStartup    prometheus.Histogram
	orphans       prometheus.Counter
	unreachable   prometheus.Counter
	podDeaths     prometheus.Counter
	overdue       prometheus.Counter
	createErrors  prometheus.Counter
	unsealed      prometheus.Gauge
	apiAway       prometheus.Gauge

	all []prometheus.Collector
}

func newMetrics() *metrics {
	r := &registry{}
	m := &metrics{
		ready: r.gauge("sandbox_pool_ready_pods",
			"Warm sandbox pods that are Ready and unclaimed."),
		target: r.gauge("sandbox_pool_target_pods",
			"How many unclaimed pods (Ready or starting) the pool keeps now: --pool-size, more under demand, at most --pool-max."),
		floor: r.gauge("sandbox_pool_min_pods",
			"The warm target's floor (--pool-size)."),
		max: r.gauge("sandbox_pool_max_pods",
			"The warm target's bound (--pool-max)."),
		targetChanges: r.counterVec("sandbox_pool_target_changes_total",
			"Moves of the warm target, by reason: claim_rate, waiting_requests, capped (grew to --pool-max), demand_fell (shrank).", []string{"reason"}),
		claimRate: r.gauge("sandbox_pool_claim_rate",
			"Requests for a pod per second, smoothed over about ten seconds: what the warm target follows."),
		startEstimate: r.gauge("sandbox_pool_pod_start_estimate_seconds",
			"Smoothed create-to-Ready time of this pool's pods: what the warm target multiplies the claim rate by."),
		recordErrors: r.counter("sandbox_pool_claim_record_errors_total",
			"Claims whose record on the pod (label and annotation, written after the job reached the runner) failed; the pod is deleted after its run regardless."),
		claimWait: r.histogram("sandbox_pool_claim_wait_seconds",
			"Time a request spent getting a pod: from a warm claim (in memory) to the full --pool-wait.",
			[]float64{.0001, .001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}),
		podStartup: r.histogram("sandbox_pool_pod_startup_seconds",
			"Time from creating a sandbox pod to seeing it Ready.",
			[]float64{.5, 1, 2, 3, 4, 5, 7.5, 10, 15, 30, 60, 120}),
		orphans: r.counter("sandbox_pool_orphans_cleaned_total",
			"Sandbox pods the janitor deleted: stale claims and pods whose owner is gone."),
		unreachable: r.counter("sandbox_pool_runner_unreachable_total",
			"Claimed pods whose runner could not be reached before the job was sent; the request moved on."),
		podDeaths: r.counter("sandbox_pool_pod_deaths_total",
			"Sandbox pods that died during a run (out of memory, evicted, deleted, node lost)."),
		overdue: r.counter("sandbox_pool_runner_overdue_total",
			fmt.Sprintf("Runs whose runner had not answered %s after the job's timeout; the pool answered timed out in its place.", answerGrace)),
		createErrors: r.counter("sandbox_pool_create_errors_total",
			"Failed attempts to create a sandbox pod."),
		unsealed: r.gauge("sandbox_pool_unsealed_pods",
			"Sandbox pods whose runner reports its network not sealed (its egress reachable: NetworkPolicy not enforced): none is used, and requests get 503 while no other pod is Ready."),
		apiAway: r.gauge("sandbox_pool_api_unreachable",
			"1 while the pool's calls to the API server go unanswered: its warm pods are still handed out, none can be made, and a request that finds none gets 503 at once."),
	}
	m.all = r.all
	return m
}

// registry makes the pool's metrics and keeps each in all as it is made, so
// that a new metric is registered where it is declared.
type registry struct{ all []prometheus.Collector }

func (r *registry) add(c prometheus.Collector) { r.all = append(r.all, c) }

func (r *registry) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	r.add(g)
	return g
}

func (r *registry) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	r.add(c)
	return c
}

func (r *registry) counterVec(name, help string, labels []string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	r.add(c)
	return c
}

func (r *registry) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	r.add(h)
	return h
}

// RegisterMetrics adds the pool's metrics to reg; the server calls it with
// the registry that /metrics serves.
func (p *Pool) RegisterMetrics(reg prometheus.Registerer) error {
	for _, c := range p.m.all {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("pool: register metrics: %w", err)
		}
	}
	return nil
}
