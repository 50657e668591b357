package server

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/mcpserver"
	"github.com/sandboxd/sandbox/internal/policy"
	"github.com/sandboxd/sandbox/wire"
)

// MCPPath is where serve offers the MCP server (package mcpserver) over
// the streamable HTTP transport, behind the front door of /v1/*.
const MCPPath = "/mcp"

// mcpEnvelope is what a POST to /mcp may hold beyond --max-body: the
// JSON-RPC envelope around run_python's arguments, which are bounded by
// --max-body themselves, as a /v1/execute body is.
const mcpEnvelope = 64 << 10

// requestCtxKey carries an /mcp request's own context to its run_python
// call. The SDK hands the tool a context with the request's values but
// not its end (it lets a handler finish when its client goes away); the
// run must end with the request, as a /v1/execute does.
type requestCtxKey struct{}

// mcpHandler serves the MCP server statelessly: each POST is a session of
// its own, so that any replica of serve can answer any request, with no
// session to find or lose, and each request's caller, audit line and
// cancellation reach the call it carries. Stateless mode gives up what
// needs a session: server-to-client requests (the tool makes none) and
// notifications outside a request (it sends none; its progress
// notifications go on the call's own response stream).
func (s *Server) mcpHandler() http.Handler {
	srv := mcpserver.New(mcpRunner{s}, mcpserver.Options{Version: s.opts.Version, Logger: s.log})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Stateless:           true,
		Logger:              s.log,
		MaxRequestBodyBytes: s.opts.MaxBody + mcpEnvelope,
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		jw := &jsonErrors{ResponseWriter: w}
		h.ServeHTTP(jw, r.WithContext(context.WithValue(r.Context(), requestCtxKey{}, r.Context())))
		if jw.status != 0 {
			s.refuse(w, r, api.Errorf(jw.status, "%s", strings.TrimSpace(jw.msg.String())))
		}
	})
}

// maxSDKError bounds what jsonErrors keeps of a refusal's text: the SDK's
// are a line.
const maxSDKError = 4 << 10

// jsonErrors holds back the SDK's own refusals, which it writes as plain
// text (a wrong Content-Type or Accept, a body over its bound, a Host
// header refused), so that they can be answered as every 4xx of serve is:
// JSON {"error"}, counted and in the audit line. Anything else passes.
type jsonErrors struct {
	http.ResponseWriter
	status int // a refusal held back; 0 for none
	msg    bytes.Buffer
}

func (w *jsonErrors) WriteHeader(code int) {
	if code >= 400 && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.status = code
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *jsonErrors) Write(b []byte) (int, error) {
	if w.status == 0 {
		return w.ResponseWriter.Write(b)
	}
	w.msg.Write(b[:min(len(b), max(0, maxSDKError-w.msg.Len()))])
	return len(b), nil
}

// Unwrap lets http.ResponseController, with which the SDK flushes its
// event stream, reach the connection.
func (w *jsonErrors) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// mcpRunner runs /mcp's run_python calls on the server's backend, each
// admitted, validated, logged and counted as one POST /v1/execute.
type mcpRunner struct{ s *Server }

// Run implements mcpserver.Runner; onOutput gets the run's output as the
// backend reads it.
func (m mcpRunner) Run(ctx context.Context, req wire.ExecuteRequest, onOutput mcpserver.OutputFunc) (res wire.Result, err error) {
	s := m.s
	if rctx, ok := ctx.Value(requestCtxKey{}).(context.Context); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(rctx, cancel)
		defer stop()
	}
	a := auditOf(ctx)
	s.metrics.begin()
	defer s.metrics.end()
	e := &execution{began: time.Now()}
	defer s.record(a, e)
	defer func() {
		// A panicking backend answers like a failing one, as on
		// /v1/execute, and the server keeps serving.
		if p := recover(); p != nil {
			e.err = fmt.Errorf("backend panicked: %v", p)
			e.status, e.outcome = http.StatusInternalServerError, wire.OutcomeFailed
			res, err = wire.Result{}, api.Errorf(e.status, "internal error: %v", e.err)
		}
	}()
	fail := func(err error) (wire.Result, error) {
		var ae *api.Error
		ae, e.outcome = answerOf(ctx, err)
		e.err, e.status = err, ae.Status
		return wire.Result{}, ae
	}

	// The front door checked the caller's grant; each call takes its
	// share of the quota, as each /v1/execute does.
	if s.opts.Gate != nil {
		_, done, err := s.opts.Gate.Admit(a.caller, policy.Snippet)
		if err != nil {
			ae, _ := api.AsError(err)
			s.decideRefused(MCPPath, a.caller, ae)
			return fail(err)
		}
		defer done()
	}
	job, err := api.Validate(req, s.opts.MaxBody)
	if err == nil {
		e.job, e.decoded = job, true
		err = allows(a, policy.Snippet, "", job.Timeout)
	}
	if err != nil {
		return fail(err)
	}
	e.reached = true
	job.Output = onOutput
	ctx, _ = api.WithTiming(ctx)
	res, err = s.opts.Backend.Execute(ctx, job)
	if err != nil {
		return fail(err)
	}
	res.RequestID = a.id
	e.result, e.status, e.outcome = res, http.StatusOK, res.Outcome()
	return res, nil
}
