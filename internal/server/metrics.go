package server

import (
	"fmt"
	"net/http"
	"runtime"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandbox/wire"
)

// durationBuckets span a trivial snippet (tens of ms) to the longest
// allowed (60 s).
var durationBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 45, 60}

// cpuBuckets span a trivial snippet's CPU (a few ms of interpreter start)
// to a minute of it; a run may use more CPU than its time where it has
// several.
var cpuBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

// rssBuckets span bare python3 (about 10 MiB) to the local backend's 1 GiB
// limit, doubling.
var rssBuckets = prometheus.ExponentialBuckets(8<<20, 2, 8)

type metrics struct {
	executions *prometheus.CounterVec
	duration   prometheus.Histogram
	cpu        prometheus.Histogram
	maxRSS     prometheus.Histogram
	inFlight   prometheus.Gauge
	// refused counts requests answered before their body was read (see
	// Server.refuse), by status code.
	refused *prometheus.CounterVec
	// decisions counts the front door's decisions on /v1/* requests.
	decisions *prometheus.CounterVec
	// inFlightCount mirrors inFlight for the shutdown log.
	inFlightCount atomic.Int64
}

func newMetrics(reg prometheus.Registerer, version string) (*metrics, error) {
	m := &metrics{
		executions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_executions_total",
			Help: "Requests to POST /v1/execute, by outcome.",
		}, []string{"outcome"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sandbox_execution_duration_seconds",
			Help:    "Time to answer POST /v1/execute for requests that reached the backend, waiting for a sandbox included.",
			Buckets: durationBuckets,
		}),
		cpu: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sandbox_execution_cpu_seconds",
			Help:    "CPU time (user and system) of each run that produced a result, all its processes together.",
			Buckets: cpuBuckets,
		}),
		maxRSS: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sandbox_execution_max_rss_bytes",
			Help:    "Peak resident memory of the largest process of each run that produced a result.",
			Buckets: rssBuckets,
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandbox_executions_in_flight",
			Help: "Executions being answered now: POST /v1/execute, and run_python calls on /mcp.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_requests_refused_total",
			Help: "Requests refused before their body was read (no such path, wrong method, a web page's, a compressed or too large body) or by the MCP SDK on /mcp, by status code.",
		}, []string{"code"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_requests_total",
			Help: "Requests to /v1/* and /mcp by the front door's decision (admitted, unauthenticated, forbidden, throttled, unavailable), and run_python calls on /mcp the policy throttled, by the caller's namespace: set for callers the policy names, empty for the rest.",
		}, []string{"path", "decision", "namespace"}),
	}
	// build_info is 1, its labels saying which build serves: a dashboard
	// joins on it to tell the replicas of a rollout apart.
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "sandbox_build_info",
		Help:        "Always 1; its labels are the version of this binary and the Go release that built it.",
		ConstLabels: prometheus.Labels{"version": version, "go_version": runtime.Version()},
	})
	buildInfo.Set(1)
	for _, c := range []prometheus.Collector{m.executions, m.duration, m.cpu, m.maxRSS, m.inFlight, m.refused, m.decisions, buildInfo} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("server: register metrics: %w", err)
		}
	}
	// Every outcome shows from the start, so that rate() over a fresh
	// series does not miss its first increment.
	for _, o := range wire.Outcomes {
		m.executions.WithLabelValues(o)
	}
	return m, nil
}

func (m *metrics) begin() {
	m.inFlight.Inc()
	m.inFlightCount.Add(1)
}

func (m *metrics) end() {
	m.inFlight.Dec()
	m.inFlightCount.Add(-1)
}

// decisionNames are the decisions by the status they answer with.
var decisionNames = map[int]string{
	http.StatusOK:                 "admitted",
	http.StatusUnauthorized:       "unauthenticated",
	http.StatusForbidden:          "forbidden",
	http.StatusTooManyRequests:    "throttled",
	http.StatusServiceUnavailable: "unavailable",
}

// decide counts a front door's decision on a request to path.
func (m *metrics) decide(path string, status int, namespace string) {
	d, ok := decisionNames[status]
	if !ok {
		d = "unavailable"
	}
	m.decisions.WithLabelValues(path, d, namespace).Inc()
}
