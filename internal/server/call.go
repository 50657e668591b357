package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/policy"
	"github.com/sandboxd/sandbox/wire"
)

// Caller makes one validated tool call in a fresh pod of its image. A
// returned *api.Error chooses the HTTP status (504 for a pod that was never
// Ready, 503 when too many calls are in flight); any other error is a 500.
type Caller interface {
	Call(ctx context.Context, call api.Call) (wire.CallResult, error)
}

// callMetrics count tool calls apart from executions: a call's duration
// includes creating its pod, which would swamp the snippets' histogram.
type callMetrics struct {
	calls    *prometheus.CounterVec
	duration prometheus.Histogram
}

func newCallMetrics(reg prometheus.Registerer) (*callMetrics, error) {
	m := &callMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_calls_total",
			Help: "Tool calls (POST /v1/call) by outcome.",
		}, []string{"outcome"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sandbox_call_duration_seconds",
			Help:    "Time from a valid tool call to its answer, pod start included.",
			Buckets: []float64{1, 2, 3, 5, 8, 13, 20, 30, 60, 120, 240},
		}),
	}
	for _, o := range wire.CallOutcomes {
		m.calls.WithLabelValues(o)
	}
	for _, c := range []prometheus.Collector{m.calls, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register call metrics: %w", err)
		}
	}
	return m, nil
}

// call serves POST /v1/call: decode, the deployment's policy, the call.
func (s *Server) call(w http.ResponseWriter, r *http.Request) {
	s.metrics.begin()
	defer s.metrics.end()
	began := time.Now()
	var (
		c       api.Call
		res     wire.CallResult
		status  int
		outcome string
		err     error
		reached bool
	)
	defer func() {
		s.recordCall(auditOf(r.Context()), began, c, res, status, outcome, err, reached)
	}()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("caller panicked: %v", p)
			status, outcome = http.StatusInternalServerError, wire.OutcomeFailed
			api.WriteError(w, status, "internal error: "+err.Error())
		}
	}()
	if r.ContentLength > s.opts.MaxBody {
		s.countRefused(http.StatusRequestEntityTooLarge)
		err = api.Errorf(http.StatusRequestEntityTooLarge, "request body too large: the limit is %d bytes", s.opts.MaxBody)
		status, outcome = s.writeErr(r.Context(), w, err)
		return
	}
	c, err = api.DecodeCall(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
	if err == nil {
		err = s.opts.CallPolicy.Check(c)
	}
	if err == nil {
		err = allows(auditOf(r.Context()), policy.ToolCall, c.Image, c.Timeout)
	}
	if err != nil {
		status, outcome = s.writeErr(r.Context(), w, err)
		return
	}
	reached = true
	c.RequestID = auditOf(r.Context()).id
	if g := auditOf(r.Context()).grant; g != nil {
		c.Egress = g.EgressFor(c.Image)
	}
	res, err = s.opts.Caller.Call(r.Context(), c)
	if err != nil {
		status, outcome = s.writeErr(r.Context(), w, err)
		return
	}
	res.RequestID = auditOf(r.Context()).id
	res = api.WriteCallResult(w, res)
	status, outcome = http.StatusOK, res.Outcome()
}

// recordCall adds what came of a call to its audit line and counts it.
// Arguments, environment values and the return value are the caller's and
// are never logged.
func (s *Server) recordCall(a *audit, began time.Time, c api.Call, res wire.CallResult, status int, outcome string, err error, reached bool) {
	d := time.Since(began)
	s.calls.calls.WithLabelValues(outcome).Inc()
	if reached {
		s.calls.duration.Observe(d.Seconds())
	}
	attrs := []slog.Attr{slog.String("outcome", outcome)}
	if c.Image != "" {
		attrs = append(attrs,
			slog.String("image", c.Image),
			slog.String("function", c.Function()),
			slog.Int("timeout_s", int(c.Timeout/time.Second)),
			slog.Int("args_bytes", len(c.Args)+len(c.Kwargs)),
			slog.Int("env_vars", len(c.Env)))
	}
	if status == http.StatusOK {
		attrs = append(attrs,
			slog.String("sandbox_id", res.SandboxID),
			slog.Int("exit_code", res.ExitCode),
			slog.Int64("run_ms", res.DurationMS),
			slog.Int("result_bytes", len(res.Result)),
			slog.Int("stdout_bytes", len(res.Stdout)),
			slog.Int("stderr_bytes", len(res.Stderr)))
		if res.Error != nil {
			attrs = append(attrs, slog.String("error_kind", res.Error.Kind), slog.String("error_type", res.Error.Type))
		}
	}
	level := slog.LevelInfo
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
		if outcome == wire.OutcomeFailed {
			level = slog.LevelError
		}
	}
	a.add(level, attrs...)
}
