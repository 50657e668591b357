// Package runner is the in-pod runner: an HTTP server that takes exactly one
// job, runs it with exec.Run, answers with the result and then stops. A
// snippet pod is used once, so whatever the snippet did to its pod cannot
// reach the next one.
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandbox/api"
	"github.com/sandboxd/sandbox/exec"
)

// Options configure a Server.
type Options struct {
	// Listen is the address to listen on, ":8080" in the pod.
	Listen string
	// MaxTimeout bounds the request's timeout_s; a request over it gets 400.
	MaxTimeout time.Duration
	// MaxBody bounds the request body; 0 means api.DefaultMaxBody.
	MaxBody int64
	// SandboxID is put in the result; the pool overwrites it with the pod name.
	SandboxID string
	// Exec is passed to exec.Run; Exec.Dir is the working directory (the
	// pod's emptyDir).
	Exec exec.Options
	// PodPidsLimit is the pod's process limit, when known: the kubelet sets
	// it on the pod's cgroup, above the container's, where the runner cannot
	// read it. 0 leaves only the container's own pids.max.
	PodPidsLimit int64
	// Logger gets one line per execution; nil discards.
	Logger *slog.Logger
	// Call makes this a tool pod's runner: it takes one POST /v1/call
	// instead of one POST /v1/execute, and runs it in Exec.Dir with
	// CallEnv as the tool's environment (see RunCall).
	Call    bool
	CallEnv []string
}

// shutdownTimeout bounds the graceful shutdown after the answer: the one
// response is already written, so this only waits for idle connections.
const shutdownTimeout = 5 * time.Second

// Server is a one-shot runner. Make it with New, then call Run once.
type Server struct {
	opts  Options
	ln    net.Listener
	srv   *http.Server
	taken atomic.Bool   // set when a job is accepted; never cleared after it ran
	done  chan struct{} // closed after the job's answer is written
	once  sync.Once
}

// New binds the listener, so that the address is known (and the port taken)
// before Run serves.
func New(opts Options) (*Server, error) {
	if opts.Exec.Dir == "" {
		return nil, errors.New("runner: no working directory")
	}
	// Fail at start-up, not at the job, when the pod lacks its volume.
	if fi, err := os.Stat(opts.Exec.Dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("runner: working directory %s is not a directory: %v", opts.Exec.Dir, err)
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = api.DefaultMaxBody
	}
	if opts.MaxTimeout <= 0 {
		opts.MaxTimeout = api.MaxTimeoutS * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	pidsMax := exec.PidsLimit()
	if p := opts.PodPidsLimit; p > 0 && (pidsMax == 0 || p < pidsMax) {
		pidsMax = p
	}
	procs, err := procBudget(opts.Exec.MaxProcs, pidsMax)
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	opts.Exec.MaxProcs = procs
	opts.Exec.Nice = snippetNice
	opts.Exec.IdleCPU = true
	opts.Logger.Info("process budget", "pids_max", pidsMax, "snippet_max_procs", procs, "runner_reserve", int64(runnerReserve))
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	s := &Server{opts: opts, ln: ln, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		api.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	if opts.Call {
		mux.HandleFunc("POST /v1/call", s.call)
	} else {
		mux.HandleFunc("POST /v1/execute", s.execute)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		api.WriteError(w, http.StatusNotFound, fmt.Sprintf("no route %s %s: the runner serves POST /v1/execute, GET /healthz and GET /readyz", r.Method, r.URL.Path))
	})
	s.srv = &http.Server{
		Handler:           methodNotAllowed(mux),
		ReadHeaderTimeout: 10 * time.Second,
	}
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Run serves until the job has been answered, then shuts down and returns
// nil. When ctx ends first it shuts down and returns ctx's cause; a job
// still running is killed through its request's context.
func (s *Server) Run(ctx context.Context) error {
	served := make(chan error, 1)
	go func() { served <- s.srv.Serve(s.ln) }() // owned: received below on every path

	var cause error
	select {
	case <-s.done:
	case <-ctx.Done():
		cause = context.Cause(ctx)
	case err := <-served:
		return fmt.Errorf("runner: serve: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	err := s.srv.Shutdown(sctx)
	if err != nil {
		s.srv.Close()
	}
	<-served // http.ErrServerClosed
	if cause != nil {
		return fmt.Errorf("runner: stopped before a job was answered: %w", cause)
	}
	if err != nil {
		return fmt.Errorf("runner: shutdown: %w", err)
	}
	return nil
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if s.taken.Load() {
		api.WriteError(w, http.StatusServiceUnavailable, "this runner has taken its job")
		return
	}
	api.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	if !s.taken.CompareAndSwap(false, true) {
		api.WriteError(w, http.StatusConflict, "this runner has already taken its one job; send the next job to a fresh sandbox")
		return
	}
	job, err := api.Decode(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
	if err == nil && job.Timeout > s.opts.MaxTimeout {
		err = api.Errorf(http.StatusBadRequest, "timeout_s %d over this runner's limit of %d seconds",
			int(job.Timeout/time.Second), int(s.opts.MaxTimeout/time.Second))
	}
	if err != nil {
		// Nothing ran, so the runner can still take a good job.
		s.taken.Store(false)
		writeRefusal(w, err)
		return
	}
	defer s.once.Do(func() { close(s.done) })

	res, err := exec.Run(r.Context(), job, s.opts.Exec)
	res.SandboxID = s.opts.SandboxID
	log := s.opts.Logger.With("sandbox_id", res.SandboxID, "exit_code", res.ExitCode,
		"duration_ms", res.DurationMS, "stdout_bytes", len(res.Stdout), "stderr_bytes", len(res.Stderr))
	switch {
	case errors.Is(err, exec.ErrInvalidJob):
		log.Info("execution refused", "outcome", api.OutcomeRejected, "error", err)
		api.WriteError(w, http.StatusBadRequest, err.Error())
		return
	case err != nil:
		log.Error("execution failed", "outcome", api.OutcomeFailed, "error", err)
		api.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	log.Info("execution", "outcome", api.OutcomeOf(res))
	api.WriteJSON(w, http.StatusOK, res)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// methodNotAllowed turns the mux's plain-text 405 into the JSON error body.
func methodNotAllowed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz", "/readyz":
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				api.WriteError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: use GET", r.Method, r.URL.Path))
				return
			}
		case "/v1/execute", "/v1/call":
			if r.Method != http.MethodPost {
				w.Header().Set("Allow", http.MethodPost)
				api.WriteError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: use POST", r.Method, r.URL.Path))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// writeRefusal answers a job refused before it ran: Decode's *api.Error as
// it says, anything else as a bad request.
func writeRefusal(w http.ResponseWriter, err error) {
	if ae, ok := api.AsError(err); ok {
		ae.Write(w)
		return
	}
	api.WriteError(w, http.StatusBadRequest, err.Error())
}
