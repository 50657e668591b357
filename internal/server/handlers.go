package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/internal/policy"
	"github.com/sandboxd/sandbox/wire"
)

// route is one path and the methods it answers.
type route struct {
	methods []string
	handler http.HandlerFunc
	// kind is what the policy judges a request of the path as; nil for a
	// path open to anyone who reaches serve (health, metrics).
	kind *policy.Kind
	// perCall: the path's requests carry requests of kind (an MCP
	// session's run_python calls) that its handler admits one by one;
	// the front door checks the caller's grant but takes no quota.
	perCall bool
}

// routes builds the handler. It routes by hand rather than with
// http.ServeMux patterns so that 404 and 405 answers are JSON like every
// other error.
func (s *Server) routes() http.Handler {
	metricsHandler := promhttp.HandlerFor(s.opts.Registry, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)})
	table := map[string]route{
		"/v1/execute": {[]string{http.MethodPost}, s.execute, ptr(policy.Snippet), false},
		MCPPath:       {[]string{http.MethodPost}, s.mcpHandler().ServeHTTP, ptr(policy.Snippet), true},
		"/healthz":    {[]string{http.MethodGet, http.MethodHead}, s.healthz, nil, false},
		"/readyz":     {[]string{http.MethodGet, http.MethodHead}, s.readyz, nil, false},
		"/metrics":    {[]string{http.MethodGet, http.MethodHead}, metricsHandler.ServeHTTP, nil, false},
	}
	if s.opts.Caller != nil {
		table["/v1/call"] = route{[]string{http.MethodPost}, s.call, ptr(policy.ToolCall), false}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := &audit{id: newRequestID(), began: time.Now()}
		w.Header().Set(RequestIDHeader, a.id)
		rec := &statusRecorder{ResponseWriter: w}
		r = r.WithContext(context.WithValue(r.Context(), auditKey{}, a))
		defer func() {
			a.status = rec.status
			s.logRequest(r, a)
		}()
		s.serve(table, rec, r, a)
	})
}

// serve routes r: a path and method of the table, the caller admitted for
// the API's paths, then the handler.
func (s *Server) serve(table map[string]route, w http.ResponseWriter, r *http.Request, a *audit) {
	if n := headerBytes(r.Header); n > maxHeaderBytes {
		s.refuse(w, r, api.Errorf(http.StatusRequestHeaderFieldsTooLarge,
			"the request's headers hold %d bytes, over the %d this service reads", n, maxHeaderBytes))
		return
	}
	rt, ok := table[r.URL.Path]
	if !ok {
		s.refuse(w, r, api.Errorf(http.StatusNotFound, "no such path %q: the API is POST /v1/execute", r.URL.Path))
		return
	}
	if !slices.Contains(rt.methods, r.Method) {
		allow := strings.Join(rt.methods, ", ")
		w.Header().Set("Allow", allow)
		s.refuse(w, r, api.Errorf(http.StatusMethodNotAllowed, "method %s not allowed on %s: use %s", r.Method, r.URL.Path, allow))
		return
	}
	if err := checkPost(r); err != nil {
		s.refuse(w, r, err)
		return
	}
	if rt.kind != nil {
		enter := s.admit
		if rt.perCall {
			enter = s.authorize
		}
		done, err := enter(r, a, *rt.kind)
		if err != nil {
			s.refuse(w, r, err)
			return
		}
		defer done()
	}
	rt.handler(w, r)
}

// maxHeaderBytes bounds what a request's headers may hold: a projected
// ServiceAccount token, the largest header a client sends, is 1 to 2 KiB.
// Go's server reads up to http.DefaultMaxHeaderBytes (1 MiB) before any
// handler runs and answers more than that with a plain-text 431 itself;
// between the two, this service's JSON 431 says how much was sent.
const maxHeaderBytes = 32 << 10

// headerBytes counts h as it came on the wire: "Name: value\r\n" each.
func headerBytes(h http.Header) int {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// refuse answers a request refused before its body was read, counts it by
// status in sandbox_requests_refused_total and puts why in its audit line,
// never the body, which was not read.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, e *api.Error) {
	s.countRefused(e.Status)
	auditOf(r.Context()).add(slog.LevelInfo, slog.String("error", e.Msg))
	e.Write(w)
}

// countRefused counts a request refused before its body was read; the
// execute and call handlers' own 413 logs as their request's line.
func (s *Server) countRefused(status int) {
	s.metrics.refused.WithLabelValues(strconv.Itoa(status)).Inc()
}

// checkPost refuses what no client of the API sends with a POST. A web
// page: any site a user visits can POST to serve on 127.0.0.1 (a form or
// fetch with a simple content type needs no preflight, and DNS rebinding
// makes it same-origin), and would run code through it; browsers mark
// such requests with Origin or Sec-Fetch-Site, and programs do not. A
// compressed body: the API reads the body as it is.
func checkPost(r *http.Request) *api.Error {
	if r.Method != http.MethodPost {
		return nil
	}
	if o, site := r.Header.Get("Origin"), r.Header.Get("Sec-Fetch-Site"); o != "" || site != "" && site != "none" {
		return &api.Error{Status: http.StatusForbidden, Msg: fmt.Sprintf(
			"a request from a web page (Origin %q, Sec-Fetch-Site %q) is refused: the API is for programs, and a page must not run code through it", o, site)}
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return &api.Error{Status: http.StatusUnsupportedMediaType, Msg: fmt.Sprintf(
			"Content-Encoding %q is not supported: send the JSON body as it is", ce)}
	}
	return nil
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	api.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	switch {
	case s.draining.Load():
		api.WriteError(w, http.StatusServiceUnavailable, "shutting down")
	case !s.opts.Backend.Ready():
		api.WriteError(w, http.StatusServiceUnavailable, "backend not ready: not started or shutting down")
	default:
		api.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	}
}

// execution is what the log line and the metrics record of one request.
type execution struct {
	status   int
	outcome  string
	result   wire.Result
	job      exec.Job
	err      error
	began    time.Time
	decoded  bool // the request was read and is valid
	reached  bool // the job reached the backend
	streamed bool // the client asked for events
}

func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	s.metrics.begin()
	defer s.metrics.end()
	e := &execution{began: time.Now()}
	defer s.record(auditOf(r.Context()), e)
	var stream *api.EventStream // set when the client asked for events
	defer func() {
		// A panicking backend answers like a failing one, and the server
		// keeps serving.
		if p := recover(); p != nil {
			e.err = fmt.Errorf("backend panicked: %v", p)
			e.status, e.outcome = http.StatusInternalServerError, wire.OutcomeFailed
			ae := api.Errorf(e.status, "internal error: %v", e.err)
			if stream != nil && stream.Stop() {
				stream.Fail(ae)
				return
			}
			ae.Write(w)
		}
	}()

	// A declared length over the limit is refused before reading a byte;
	// MaxBytesReader catches bodies that do not declare it.
	if r.ContentLength > s.opts.MaxBody {
		s.countRefused(http.StatusRequestEntityTooLarge)
		e.err = api.Errorf(http.StatusRequestEntityTooLarge, "request body too large: the limit is %d bytes", s.opts.MaxBody)
		e.status, e.outcome = s.writeErr(r.Context(), w, e.err)
		return
	}
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxBody)
	job, err := api.Decode(body)
	if err == nil {
		e.job, e.decoded = job, true
		err = allows(auditOf(r.Context()), policy.Snippet, "", job.Timeout)
	}
	if err != nil {
		e.err = err
		e.status, e.outcome = s.writeErr(r.Context(), w, err)
		return
	}
	e.reached = true
	ctx, timing := api.WithTiming(r.Context())
	if api.WantsEventStream(r.Header) {
		// The same run, its output passed on as it comes (see
		// api.EventStream); the timing follows the events as a trailer.
		stream = api.NewEventStream(w, api.ServerTiming)
		job.Output = stream.Output
		e.streamed = true
	}
	res, err := s.opts.Backend.Execute(ctx, job)
	timing.Add(api.TimingTotal, time.Since(e.began))
	res.RequestID = auditOf(r.Context()).id
	// The stream's flusher writes the headers when it begins: they are
	// this goroutine's again only once it has stopped.
	begun := stream != nil && stream.Stop()
	w.Header().Set(api.ServerTiming, timing.Header())
	if begun {
		// Begun: the status is said, and what follows are events.
		if err != nil {
			e.err = err
			var ae *api.Error
			ae, e.outcome = answerOf(r.Context(), err)
			e.status = ae.Status
			stream.Fail(ae)
			return
		}
		e.result, e.status, e.outcome = res, http.StatusOK, res.Outcome()
		stream.Finish(res)
		return
	}
	if err != nil {
		e.err = err
		e.status, e.outcome = s.writeErr(r.Context(), w, err)
		return
	}
	e.result, e.status, e.outcome = res, http.StatusOK, res.Outcome()
	if stream != nil {
		stream.Finish(res)
		return
	}
	api.WriteJSON(w, http.StatusOK, res)
}

// writeErr answers err (see answerOf) and returns the status and outcome.
func (s *Server) writeErr(ctx context.Context, w http.ResponseWriter, err error) (int, string) {
	ae, outcome := answerOf(ctx, err)
	ae.Write(w)
	return ae.Status, outcome
}

// answerOf is the answer to err and the outcome it counts as. An
// *api.Error chooses the status (and Retry-After); anything else is a 500
// naming it, or a 503 once ctx has ended.
func answerOf(ctx context.Context, err error) (*api.Error, string) {
	if ae, ok := api.AsError(err); ok {
		if ae.Status >= 500 && ae.Status != http.StatusServiceUnavailable {
			return ae, wire.OutcomeFailed
		}
		return ae, wire.OutcomeRejected
	}
	if ctx.Err() != nil {
		// Nobody may be listening any more, but say what happened.
		return api.Errorf(http.StatusServiceUnavailable, "execution cancelled: %v", err), wire.OutcomeCanceled
	}
	return api.Errorf(http.StatusInternalServerError, "execution failed: %v", err), wire.OutcomeFailed
}

// record adds what came of the execution to its audit line and updates the
// metrics. The code is never logged, only its hash: it is the user's, and
// may hold anything.
func (s *Server) record(a *audit, e *execution) {
	d := time.Since(e.began)
	s.metrics.executions.WithLabelValues(e.outcome).Inc()
	if e.reached {
		s.metrics.duration.Observe(d.Seconds())
	}
	attrs := []slog.Attr{slog.String("outcome", e.outcome)}
	if e.decoded {
		attrs = append(attrs,
			slog.String("code_sha256", codeHash(e.job.Code)),
			slog.Int("timeout_s", int(e.job.Timeout/time.Second)),
			slog.Int("files", len(e.job.Files)),
			slog.Int("outputs", len(e.job.Outputs)),
			slog.Int("code_bytes", len(e.job.Code)))
	}
	if e.streamed {
		attrs = append(attrs, slog.Bool("streamed", true))
	}
	if e.status == http.StatusOK {
		u := e.result.Usage
		s.metrics.cpu.Observe(float64(u.CPUMS) / 1000)
		s.metrics.maxRSS.Observe(float64(u.MaxRSSKiB) * 1024)
		attrs = append(attrs,
			slog.String("sandbox_id", e.result.SandboxID),
			slog.Int("exit_code", e.result.ExitCode),
			slog.Int64("run_ms", e.result.DurationMS),
			slog.Int("stdout_bytes", len(e.result.Stdout)),
			slog.Int("stderr_bytes", len(e.result.Stderr)),
			slog.Bool("stdout_truncated", e.result.StdoutTruncated),
			slog.Bool("stderr_truncated", e.result.StderrTruncated),
			slog.Int64("cpu_ms", u.CPUMS),
			slog.Int64("max_rss_kib", u.MaxRSSKiB),
			slog.Int("output_files", len(e.result.Files)))
	}
	level := slog.LevelInfo
	if e.err != nil {
		attrs = append(attrs, slog.String("error", e.err.Error()))
		if e.outcome == wire.OutcomeFailed {
			level = slog.LevelError
		}
	}
	a.add(level, attrs...)
}

// newRequestID names one request in the log, also for requests that never
// got a sandbox.
func newRequestID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
