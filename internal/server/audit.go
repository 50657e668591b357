package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/sandboxd/sandbox/internal/auth"
	"github.com/sandboxd/sandbox/internal/policy"
)

// RequestIDHeader carries a request's id in every answer, so that an
// agent's own log can be joined to serve's audit line.
const RequestIDHeader = "X-Request-Id"

// audit is one request's line in the log, from its first byte to its
// answer: who asked, for what, and what came of it. The handlers add what
// they learn; the front door writes it once, whatever the answer.
type audit struct {
	id     string
	began  time.Time
	caller auth.Identity
	// grant is the caller's entry in the policy; nil when there is none to
	// apply (authentication off).
	grant  *policy.Caller
	status int

	// mu guards level and attrs: /mcp adds them from the MCP server's
	// goroutines, which the front door waits for before it logs.
	mu    sync.Mutex
	level slog.Level
	attrs []slog.Attr
}

type auditKey struct{}

// auditOf is the request's audit line; a request that did not come through
// the front door (a handler's unit test) gets a throwaway one.
func auditOf(ctx context.Context) *audit {
	if a, ok := ctx.Value(auditKey{}).(*audit); ok {
		return a
	}
	return &audit{}
}

// add records attrs, at level when that is more severe than what was there.
func (a *audit) add(level slog.Level, attrs ...slog.Attr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.attrs = append(a.attrs, attrs...)
	a.level = max(a.level, level)
}

// codeHash is what the log says of a snippet: its SHA-256, enough to find
// the same code again, never the code.
func codeHash(code string) string {
	h := sha256.Sum256([]byte(code))
	return hex.EncodeToString(h[:])
}

// logRequest writes a's line. Health checks and scrapes come every few
// seconds from the kubelet and Prometheus: they log at debug level.
func (s *Server) logRequest(r *http.Request, a *audit) {
	a.mu.Lock()
	defer a.mu.Unlock()
	level := a.level
	if r.URL.Path != "/v1/execute" && r.URL.Path != "/v1/call" && r.URL.Path != MCPPath && a.status < 400 {
		level = slog.LevelDebug
	}
	attrs := append([]slog.Attr{
		slog.String("id", a.id),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.String("remote", r.RemoteAddr),
		slog.String("caller", a.caller.User),
		slog.String("caller_namespace", a.caller.Namespace()),
		slog.Int("status", a.status),
		slog.Int64("duration_ms", time.Since(a.began).Milliseconds()),
	}, a.attrs...)
	s.log.LogAttrs(context.Background(), level, "request", attrs...)
}

// statusRecorder remembers the status a handler wrote, for the audit line.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }
