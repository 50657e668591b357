package egress

import "github.com/prometheus/client_golang/prometheus"

// metrics count the gateway's decisions. Labels stay few (verdict, reason,
// direction): hosts and pods are in the log lines, not in label values an
// agent could multiply.
type metrics struct {
	conns    *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	duration prometheus.Histogram
	active   prometheus.Gauge
	pods     prometheus.Gauge
}

func newMetrics() *metrics {
	return &metrics{
		conns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandbox_egress_connections_total",
			Help: "Connections the egress gateway judged, by verdict (allowed, refused) and the reason of a refusal (or of an allowed connection's end)."}, []string{"verdict", "reason"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandbox_egress_bytes_total",
			Help: "Bytes the egress gateway passed, by direction: out (tool to server) or in."}, []string{"direction"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sandbox_egress_connection_seconds",
			Help: "How long the gateway's allowed connections lasted.", Buckets: prometheus.ExponentialBuckets(0.01, 4, 9)}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sandbox_egress_active_connections", Help: "Connections open through the gateway."}),
		pods:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "sandbox_egress_tool_pods", Help: "Live tool pods with an allow list the gateway attributes connections to."}),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.conns, m.bytes, m.duration, m.active, m.pods} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}
