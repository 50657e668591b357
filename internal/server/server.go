package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/auth"
	"github.com/sandboxd/sandbox/internal/policy"
)

// Timeouts of the HTTP server.
const (
	// DefaultShutdownTimeout is how long Run waits, after its context ends,
	// for executions in flight: the longest snippet (api.MaxTimeoutS) plus
	// room to report it. After that they are cancelled.
	DefaultShutdownTimeout = api.MaxTimeoutS*time.Second + 10*time.Second
	// readHeaderTimeout and readTimeout bound a slow client's hold on a
	// connection before its request is complete; a 1 MiB body needs far less.
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
	// writeSlack is what writing an answer may take once it is ready: tens
	// of MiB at the most (api.MaxResultBytes) to a client on a slow link.
	// The write timeout is the longest answer (see MaxAnswerer) plus this.
	writeSlack = time.Minute
	// idleTimeout closes keep-alive connections agents forgot about.
	idleTimeout = 2 * time.Minute
)

// Options configure a Server.
type Options struct {
	// Backend runs the jobs. Required.
	Backend Backend
	// Logger receives one line per execution and the server's own events;
	// nil discards them.
	Logger *slog.Logger
	// MaxBody bounds a request body; 0 means api.DefaultMaxBody.
	MaxBody int64
	// Registry holds the server's metrics and is what /metrics serves;
	// backends register theirs on it too. nil means a fresh registry with
	// the Go runtime and process collectors (process_resident_memory_bytes...).
	Registry *prometheus.Registry
	// Listen is the TCP address Run binds, e.g. "127.0.0.1:8080".
	Listen string
	// ShutdownTimeout bounds how long Run lets executions in flight finish
	// after its context ends; 0 means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Caller makes tool calls (POST /v1/call) under CallPolicy; nil leaves
	// the path unserved (404), so a deployment opts in.
	Caller     Caller
	CallPolicy api.CallPolicy
	// Auth names each caller of /v1/*; nil means auth.None, every caller
	// anonymous.
	Auth auth.Authenticator
	// Gate admits callers under the caller policy; nil admits every caller
	// Auth names (authentication off has no policy to apply).
	Gate *policy.Gate
	// Version is the binary's, for sandbox_build_info; "" means "dev".
	Version string
}

// MaxAnswerer is implemented by a Backend or Caller that can say how long
// its answer may take at the most, from the request's arrival to its
// result: its waits for capacity, the longest run and the slack after it,
// as configured. The server's write timeout covers the longest, so that
// raising a wait cannot cut an answer off mid-write.
type MaxAnswerer interface {
	MaxAnswer() time.Duration
}

// writeTimeout is the HTTP write timeout: the longest answer of the
// backend and the caller (the longest snippet for one that does not say),
// and writeSlack to write it.
func (s *Server) writeTimeout() time.Duration {
	longest := api.MaxTimeoutS * time.Second
	for _, x := range []any{s.opts.Backend, s.opts.Caller} {
		if m, ok := x.(MaxAnswerer); ok {
			longest = max(longest, m.MaxAnswer())
		}
	}
	return longest + writeSlack
}

// MetricsRegisterer is implemented by backends that have metrics of their
// own; New calls RegisterMetrics with the server's registry.
type MetricsRegisterer interface {
	RegisterMetrics(prometheus.Registerer) error
}

// Server is the sandbox HTTP API.
type Server struct {
	opts    Options
	log     *slog.Logger
	metrics *metrics
	calls   *callMetrics
	handler http.Handler

	// runCtx is the parent of every execution's context. It outlives the
	// context given to Run, so that a shutdown lets executions in flight
	// finish; cancelRuns ends them when the shutdown wait is over.
	runCtx     context.Context
	cancelRuns context.CancelFunc
	draining   atomic.Bool

	mu sync.Mutex
	ln net.Listener
}

// New checks opts and builds a Server. It does not bind the listener; Listen
// or Run do.
func New(opts Options) (*Server, error) {
	if opts.Backend == nil {
		return nil, errors.New("server: no backend")
	}
	if opts.MaxBody < 0 {
		return nil, fmt.Errorf("server: max body %d is negative", opts.MaxBody)
	}
	if opts.MaxBody == 0 {
		opts.MaxBody = api.DefaultMaxBody
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
		opts.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Auth == nil {
		opts.Auth = auth.None{}
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	m, err := newMetrics(opts.Registry, opts.Version)
	if err != nil {
		return nil, err
	}
	if mr, ok := opts.Backend.(MetricsRegisterer); ok {
		if err := mr.RegisterMetrics(opts.Registry); err != nil {
			return nil, fmt.Errorf("server: register backend metrics: %w", err)
		}
	}
	if opts.Gate != nil {
		if err := opts.Gate.RegisterMetrics(opts.Registry); err != nil {
			return nil, err
		}
	}
	s := &Server{opts: opts, log: log, metrics: m}
	if opts.Caller != nil {
		if s.calls, err = newCallMetrics(opts.Registry); err != nil {
			return nil, err
		}
		if mr, ok := opts.Caller.(MetricsRegisterer); ok {
			if err := mr.RegisterMetrics(opts.Registry); err != nil {
				return nil, fmt.Errorf("server: register caller metrics: %w", err)
			}
		}
	}
	s.runCtx, s.cancelRuns = context.WithCancel(context.Background())
	s.handler = s.routes()
	return s, nil
}

// Handler returns the server's HTTP handler, for tests and for embedding.
func (s *Server) Handler() http.Handler { return s.handler }

// Listen binds Options.Listen, if not bound yet, and returns the address:
// with port 0 it tells which port was chosen. Run calls it.
func (s *Server) Listen() (net.Addr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		ln, err := net.Listen("tcp", s.opts.Listen)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", s.opts.Listen, err)
		}
		s.ln = ln
	}
	return s.ln.Addr(), nil
}

// Run binds the listener, then serves until ctx ends. Then it stops
// accepting connections, lets executions in flight finish for at most
// Options.ShutdownTimeout, cancels those still running, and returns. It
// returns nil after a clean shutdown.
func (s *Server) Run(ctx context.Context) error {
	addr, err := s.Listen()
	if err != nil {
		return err
	}
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      s.writeTimeout(),
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return s.runCtx },
	}
	s.log.Info("serving", "addr", addr.String())

	served := make(chan error, 1)
	go func() { served <- hs.Serve(s.ln) }() // owned here: both paths below receive from served

	select {
	case err := <-served:
		s.cancelRuns()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	s.draining.Store(true)
	s.log.Info("shutting down: waiting for executions in flight",
		"in_flight", s.metrics.inFlightCount.Load(), "timeout", s.opts.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	err = hs.Shutdown(sctx)
	if err != nil {
		// The wait is over: end the runs, then the connections.
		s.log.Warn("shutdown timeout: cancelling executions in flight", "in_flight", s.metrics.inFlightCount.Load())
		s.cancelRuns()
		hs.Close()
	}
	s.cancelRuns()
	if serr := <-served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", serr)
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	s.log.Info("stopped")
	return nil
}
