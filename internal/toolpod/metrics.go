package toolpod

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	ready   prometheus.Histogram
	cleaned prometheus.Counter
	active  prometheus.Gauge
}

func newMetrics() *metrics {
	return &metrics{
		ready: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sandbox_tool_pod_ready_seconds",
			Help:    "Time from creating a tool-call pod to its being Ready (scheduling, image pull, runner start, the policy delay).",
			Buckets: []float64{1, 2, 3, 5, 8, 13, 20, 30, 60, 110},
		}),
		cleaned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandbox_tool_pods_cleaned_total",
			Help: "Stale tool-call pods the janitor deleted (a failed delete, a restarted service).",
		}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandbox_tool_pods_active",
			Help: "Tool-call pods of calls in flight on this replica.",
		}),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.ready, m.cleaned, m.active} {
		if err := r.Register(c); err != nil {
			return fmt.Errorf("register tool pod metrics: %w", err)
		}
	}
	return nil
}
