package pool

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the pool's own; executions by outcome are the server's.
type metrics struct {
	ready        prometheus.Gauge
	target       prometheus.Gauge
	claimWait    prometheus.Histogram
	podStartup   prometheus.Histogram
	orphans      prometheus.Counter
	unreachable  prometheus.Counter
	podDeaths    prometheus.Counter
	createErrors prometheus.Counter
	unsealed     prometheus.Gauge
}

func newMetrics() *metrics {
	return &metrics{
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandbox_pool_ready_pods",
			Help: "Warm sandbox pods that are Ready and unclaimed.",
		}),
		target: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandbox_pool_target_pods",
			Help: "How many Ready, unclaimed pods the pool keeps (--pool-size).",
		}),
		claimWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sandbox_pool_claim_wait_seconds",
			Help:    "Time a request spent getting a pod: from a warm claim (one API write) to the full --pool-wait.",
			Buckets: []float64{.002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
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
	return []prometheus.Collector{m.ready, m.target, m.claimWait, m.podStartup, m.orphans, m.unreachable, m.podDeaths, m.createErrors, m.unsealed}
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
