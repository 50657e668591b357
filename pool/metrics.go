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
}

func newMetrics() *metrics {
	return &metrics{
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandbox_pool_ready_pods",
			Help: "Warm sandbox pods that are Ready and unclaimed.",
		}),
		target: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandbox_pool_target_pods",
			Help: "How many unclaimed pods (Ready or starting) the pool keeps now: --pool-size, more under demand, at most --pool-max.",
		}),
		floor: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandbox_pool_min_pods",
			Help: "The warm target's floor (--pool-size).",
		}),
		max: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandbox_pool_max_pods",
			Help: "The warm target's bound (--pool-max).",
		}),
		targetChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_pool_target_changes_total",
			Help: "Moves of the warm target, by reason: claim_rate, waiting_requests, capped (grew to --pool-max), demand_fell (shrank).",
		}, []string{"reason"}),
		claimRate: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandbox_pool_claim_rate",
			Help: "Requests for a pod per second, smoothed over about ten seconds: what the warm target follows.",
		}),
		startEstimate: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandbox_pool_pod_start_estimate_seconds",
			Help: "Smoothed create-to-Ready time of this pool's pods: what the warm target multiplies the claim rate by.",
		}),
		recordErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandbox_pool_claim_record_errors_total",
			Help: "Claims whose record on the pod (label and annotation, written after the job reached the runner) failed; the pod is deleted after its run regardless.",
		}),
		claimWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sandbox_pool_claim_wait_seconds",
			Help:    "Time a request spent getting a pod: from a warm claim (in memory) to the full --pool-wait.",
			Buckets: []float64{.0001, .001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		podStartup: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sandbox_pool_pod_startup_seconds",
			Help:    "Time from creating a sandbox pod to seeing it Ready.",
			Buckets: []float64{.5, 1, 2, 3, 4, 5, 7.5, 10, 15, 30, 60, 120},
		}),
		orphans: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandbox_pool_orphans_cleaned_total",
			Help: "Sandbox pods the janitor deleted: stale claims and pods whose owner is gone.",
		}),
		unreachable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandbox_pool_runner_unreachable_total",
			Help: "Claimed pods whose runner could not be reached before the job was sent; the request moved on.",
		}),
		podDeaths: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandbox_pool_pod_deaths_total",
			Help: "Sandbox pods that died during a run (out of memory, evicted, deleted, node lost).",
		}),
		overdue: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandbox_pool_runner_overdue_total",
			Help: fmt.Sprintf("Runs whose runner had not answered %s after the job's timeout; the pool answered timed out in its place.", answerGrace),
		}),
		createErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandbox_pool_create_errors_total",
			Help: "Failed attempts to create a sandbox pod.",
		}),
		unsealed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandbox_pool_unsealed_pods",
			Help: "Sandbox pods whose runner reports its network not sealed (its egress reachable: NetworkPolicy not enforced): none is used, and requests get 503 while no other pod is Ready.",
		}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.ready, m.target, m.floor, m.max, m.targetChanges, m.claimRate, m.startEstimate, m.recordErrors, m.claimWait, m.podStartup, m.orphans, m.unreachable, m.podDeaths, m.overdue, m.createErrors, m.unsealed}
}

// RegisterMetrics adds the pool's metrics to reg; the server calls it with
// the registry that /metrics serves.
func (p *Pool) RegisterMetrics(reg prometheus.Registerer) error {
	for _, c := range p.m.collectors() {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("pool: register metrics: %w", err)
		}
	}
	return nil
}
