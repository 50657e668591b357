//go:build linux

// Package runner is the in-pod runner: an HTTP server that takes exactly one
// job, runs it, answers with the result and then stops. A snippet pod is used
// once, so whatever the snippet did to its pod cannot reach the next one.
//
// The snippet's python3 is started with the runner (exec.Prestart) and waits,
// its limits applied, for the job, so that a job does not pay for the
// interpreter's start; with Exec.Preload it imports those modules while it
// waits, which readiness does not wait for. The runner is ready (GET /readyz) once the interpreter
// waits and, in a cluster, the pod's seal is proven (Options.SealTargets). An
// interpreter that ends before a job, or is not waiting within ReadyTimeout,
// ends the runner with an error, so that the pod fails and is replaced; a job
// that meets such an interpreter is refused with 503 and nothing of it runs.
//
// It runs in a Linux pod on exec's running, which is Linux only, so every
// file of it is built for Linux only.
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

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/internal/seal"
	"github.com/sandboxd/sandbox/wire"
)

// Options configure a Server.
type Options struct {
	// Listen is the address to listen on, ":8080" in the pod.
	Listen string
	// MaxTimeout bounds the request's timeout_s; a request over it gets 400.
	MaxTimeout time.Duration
	// MaxBody bounds the request body; 0 means api.MaxForwardedBody (serve
	// has bounded what the caller sent).
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
	// ReadyTimeout bounds the start of the snippet's interpreter; 0 means
	// DefaultReadyTimeout.
	ReadyTimeout time.Duration

	// SealTargets are addresses the pod must not reach. With any, the
	// runner is Ready, and takes its job, only while it has proven (at most
	// seal.MaxAge ago) that every one of them is cut: refused, unreachable
	// or silent (see package seal). Without any there is nothing to prove
	// (outside a cluster) and it is Ready at once.
	SealTargets []seal.Target
	// Resolver, when set, is the address the runner answers DNS on
	// (seal.ResolverAddr in a sealed pod): bound in New, before anything
	// can run in the pod, and closed when Run returns.
	Resolver string
	// GiveUp is how long the runner waits unproven before it ends with the
	// evidence; 0 means seal.GiveUp.
	GiveUp time.Duration
	// WeakenUnprovenReady reports Ready and takes the job without the
	// proof (weaken.UnprovenReady); never in a real deployment.
	WeakenUnprovenReady bool
}

// DefaultReadyTimeout: python3 waits for its job tens of milliseconds after
// its start, seconds on a node that is very busy. One that is not waiting
// after a minute will not be; ending the runner then gets the pod replaced
// sooner than the pool's own bound on pods that never become Ready.
const DefaultReadyTimeout = time.Minute

// shutdownTimeout bounds the graceful shutdown after the answer: the one
// response is already written, so this only waits for idle connections.
const shutdownTimeout = 5 * time.Second

// Server is a one-shot runner. Make it with New, then call Run once.
type Server struct {
	opts     Options
	ln       net.Listener
	guard    *seal.Guard    // nil: nothing to prove
	resolver *seal.Resolver // nil: the pod's DNS is not ours
	given    error          // set when the runner gave up unproven
	srv      *http.Server
	interp   *exec.Interp  // the job's python3, set by Run before it serves; nil for a tool call
	taken    atomic.Bool   // set when a job is accepted; never cleared after it ran
	done     chan struct{} // closed after the job's answer is written
	once     sync.Once
	born     time.Time // New's start: the runner's own start, as near as it can see
	startup  startup
}

// startup is when the runner's pod got warm, each moment as the time since
// born (0: not yet), for the TimingPod* parts of the job's answer.
type startup struct {
	python, sealed, ready atomic.Int64
}

// mark records d as the moment of m, once.
func mark(m *atomic.Int64, d time.Duration) { m.CompareAndSwap(0, max(int64(d), 1)) }

// add puts the moments known into timing; arrived is when the job came.
func (st *startup) add(timing *api.Timing, born, arrived time.Time) {
	for _, p := range []struct {
		name string
		at   *atomic.Int64
	}{{api.TimingPodPython, &st.python}, {api.TimingPodSealed, &st.sealed}, {api.TimingPodReady, &st.ready}} {
		if d := p.at.Load(); d > 0 {
			timing.Add(p.name, time.Duration(d))
		}
	}
	if d := st.ready.Load(); d > 0 {
		timing.Add(api.TimingPodWarm, arrived.Sub(born.Add(time.Duration(d))))
	}
}

// New binds the listener, so that the address is known (and the port taken)
// before Run serves.
func New(opts Options) (*Server, error) {
	born := time.Now()
	if opts.Exec.Dir == "" {
		return nil, errors.New("runner: no working directory")
	}
	// Fail at start-up, not at the job, when the pod lacks its volume.
	if fi, err := os.Stat(opts.Exec.Dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("runner: working directory %s is not a directory: %v", opts.Exec.Dir, err)
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = api.MaxForwardedBody
	}
	if opts.MaxTimeout <= 0 {
		opts.MaxTimeout = api.MaxTimeoutS * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = DefaultReadyTimeout
	}
	if opts.GiveUp <= 0 {
		opts.GiveUp = seal.GiveUp
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
	s := &Server{opts: opts, done: make(chan struct{}), born: born}
	if opts.Resolver != "" {
		// Before the runner's own port: the pod is not Ready, and so runs
		// nothing, until both are bound.
		if s.resolver, err = seal.ListenResolver(opts.Resolver); err != nil {
			return nil, fmt.Errorf("runner: %w", err)
		}
	}
	if len(opts.SealTargets) > 0 {
		s.guard = seal.NewGuard(seal.Prover{Targets: opts.SealTargets}, func(c seal.Check) {
			if c.Sealed {
				mark(&s.startup.sealed, time.Since(s.born))
				opts.Logger.Info("network sealed: every target is cut", "evidence", c.Evidence())
			} else {
				opts.Logger.Warn(api.NotSealed+": not Ready, no job taken until it is", "evidence", c.Evidence())
			}
		})
	}
	s.ln, err = net.Listen("tcp", opts.Listen)
	if err != nil {
		s.closeResolver()
		return nil, fmt.Errorf("runner: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /seal", s.sealState)
	if opts.Call {
		mux.HandleFunc("POST /v1/call", s.call)
	} else {
		mux.HandleFunc("POST /v1/execute", s.execute)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		api.WriteError(w, http.StatusNotFound, fmt.Sprintf("no route %s %s: the runner serves POST /v1/execute, GET /healthz, GET /readyz and GET /seal", r.Method, r.URL.Path))
	})
	s.srv = &http.Server{
		Handler:           methodNotAllowed(mux),
		ReadHeaderTimeout: 10 * time.Second,
	}
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// ResolverAddr is the address the runner answers DNS on, "" without one.
func (s *Server) ResolverAddr() string {
	if s.resolver == nil {
		return ""
	}
	return s.resolver.Addr()
}

// Run starts the job's interpreter and serves until the job has been
// answered, then shuts down and returns nil. When ctx ends first, or the
// interpreter ends before a job or does not get ready in time, or the seal
// goes unproven for GiveUp, it shuts down and returns why; a job still
// running is killed through its request's context.
func (s *Server) Run(ctx context.Context) error {
	var ready, lost, preloaded <-chan struct{}
	var notReady <-chan time.Time
	if !s.opts.Call {
		p, err := exec.Prestart(s.opts.Exec)
		if err != nil {
			s.ln.Close()
			s.closeResolver()
			return fmt.Errorf("runner: %w", err)
		}
		// After the shutdown: a job's run owns the interpreter until then.
		defer p.Close()
		s.interp = p
		ready, lost = p.Ready(), p.Lost()
		if len(s.opts.Exec.Preload) > 0 {
			preloaded = p.Preloaded()
		}
		t := time.NewTimer(s.opts.ReadyTimeout)
		defer t.Stop()
		notReady = t.C
	}
	started := time.Now()
	// The proof and the resolver live as long as the server: the resolver
	// still answers the snippet's lookups while its job runs.
	bgCtx, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	var bg sync.WaitGroup
	defer func() {
		stopBg()
		bg.Wait()
	}()
	if s.guard != nil {
		bg.Go(func() { s.guard.Run(bgCtx) })
	}
	if s.resolver != nil {
		bg.Go(func() {
			if err := s.resolver.Serve(bgCtx); err != nil {
				s.opts.Logger.Error("resolver stopped", "error", err)
			}
		})
	}
	served := make(chan error, 1)
	go func() { served <- s.srv.Serve(s.ln) }() // owned: received below on every path

	var cause error
	giveUp := time.NewTicker(time.Second)
	defer giveUp.Stop()
wait:
	for {
		select {
		case <-s.done:
			break wait
		case <-ctx.Done():
			cause = context.Cause(ctx)
			break wait
		case err := <-served:
			return fmt.Errorf("runner: serve: %w", err)
		case <-ready:
			ready, notReady = nil, nil
			mark(&s.startup.python, time.Since(s.born))
			s.opts.Logger.Info("python3 waits for the job", "pid", s.interp.Pid(), "start_ms", time.Since(started).Milliseconds())
		case <-preloaded:
			preloaded = nil
			s.logPreload(time.Since(started))
		case <-notReady:
			cause = fmt.Errorf("python3 was not waiting for the job %s after its start", s.opts.ReadyTimeout)
			s.interp.Close()
			break wait
		case <-lost:
			// A job's run that lost it answers for it; only an unused
			// interpreter reports here.
			lost = nil
			if err := s.interp.Close(); err != nil {
				cause = err
				break wait
			}
		case <-giveUp.C:
			if s.gaveUp() != nil {
				break wait
			}
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	err := s.srv.Shutdown(sctx)
	if err != nil {
		s.srv.Close()
	}
	<-served // http.ErrServerClosed
	if s.given != nil {
		return s.given
	}
	if cause != nil {
		s.opts.Logger.Error("runner stopped before a job was answered", "error", cause)
		return fmt.Errorf("runner: stopped before a job was answered: %w", cause)
	}
	if err != nil {
		return fmt.Errorf("runner: shutdown: %w", err)
	}
	return nil
}

// LogPreloaded begins the runner's log line once its python3 has imported
// the preload, whether or not some modules were missing.
const LogPreloaded = "python3 preloaded"

// logPreload says, once, that the interpreter has imported its preload
// (after took, since its start) and which modules it lacks.
func (s *Server) logPreload(took time.Duration) {
	log := s.opts.Logger.With("preload", s.opts.Exec.Preload, "preload_ms", took.Milliseconds())
	if m := s.interp.Missing(); len(m) > 0 {
		log.Warn(LogPreloaded+" what it has; the image lacks some modules", "missing", m)
		return
	}
	log.Info(LogPreloaded + " its modules")
}

// healthz answers liveness, with the state of the preload: "done" (and
// the modules missing), "running", or "none" without one.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	h := map[string]any{"status": "ok", "preload": "none"}
	if s.interp != nil && len(s.opts.Exec.Preload) > 0 {
		h["preload"] = "running"
		if isClosed(s.interp.Preloaded()) {
			h["preload"], h["preload_missing"] = "done", s.interp.Missing()
		}
	}
	api.WriteJSON(w, http.StatusOK, h)
}

// readyz is the kubelet's readiness probe: Ready once the seal is proven
// (see Options.SealTargets) and the job's python3 waits. A probe that
// arrives before the proof is held up to seal.ReadyWait, so that a proof
// landing between two probes counts at once; the interpreter, which waits
// after tens of milliseconds, is asked after that hold.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.taken.Load() {
		api.WriteError(w, http.StatusServiceUnavailable, "this runner has taken its job")
		return
	}
	sealed := false
	if s.guard != nil && !s.opts.WeakenUnprovenReady {
		c, ok := s.guard.Wait(r.Context(), seal.ReadyWait)
		if !ok {
			api.WriteError(w, http.StatusServiceUnavailable, notSealed(c))
			return
		}
		sealed = true
	}
	switch {
	case s.interp != nil && isClosed(s.interp.Lost()):
		api.WriteError(w, http.StatusServiceUnavailable, "python3 ended before a job; this runner takes none")
	case s.interp != nil && !isClosed(s.interp.Ready()):
		api.WriteError(w, http.StatusServiceUnavailable, "python3 is starting")
	default:
		// The proof and python3's wait are marked where they are heard of,
		// which may be after this probe saw them: they happened by now at
		// the latest.
		if sealed {
			mark(&s.startup.sealed, time.Since(s.born))
		}
		if s.interp != nil {
			mark(&s.startup.python, time.Since(s.born))
		}
		mark(&s.startup.ready, time.Since(s.born))
		api.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (s *Server) sealState(w http.ResponseWriter, _ *http.Request) {
	if s.guard == nil {
		api.WriteJSON(w, http.StatusOK, api.SealState{Sealed: true, Checked: true, Evidence: "nothing to prove: no seal target"})
		return
	}
	c, ok := s.guard.Last()
	api.WriteJSON(w, http.StatusOK, api.SealState{Sealed: ok && s.guard.Sealed(time.Now()), Checked: ok, CheckedAt: c.At, Evidence: c.Evidence()})
}

// unsealed answers a job that arrived without a current proof, and reports
// whether it did: nothing runs on a network not proven sealed.
func (s *Server) unsealed(w http.ResponseWriter) bool {
	if s.guard == nil || s.opts.WeakenUnprovenReady || s.guard.Sealed(time.Now()) {
		return false
	}
	c, _ := s.guard.Last()
	api.WriteError(w, http.StatusServiceUnavailable, notSealed(c))
	return true
}

func notSealed(c seal.Check) string {
	if c.At.IsZero() {
		return api.NotSealed + ": not proven yet"
	}
	return fmt.Sprintf("%s: %s (checked %s ago)", api.NotSealed, c.Evidence(), time.Since(c.At).Round(time.Millisecond))
}

// gaveUp ends a runner that has gone unproven for seal.GiveUp without a
// job: its error, the evidence, becomes the pod's termination message
// (the pod's FallbackToLogsOnError), where serve reads why.
func (s *Server) gaveUp() error {
	if s.guard == nil || s.opts.WeakenUnprovenReady || s.taken.Load() || s.guard.UnprovenFor(time.Now()) < s.opts.GiveUp {
		return nil
	}
	// Refuse a job that would race the shutdown: one is never taken unsealed.
	if !s.taken.CompareAndSwap(false, true) {
		return nil
	}
	c, _ := s.guard.Last()
	s.given = fmt.Errorf("runner: gave up after %s: %s", s.opts.GiveUp, notSealed(c))
	return s.given
}

func (s *Server) closeResolver() {
	if s.resolver != nil {
		s.resolver.Close()
	}
}

func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	began := time.Now()
	if s.unsealed(w) {
		return
	}
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
	// A job that comes while python3 starts waits for it: tens of
	// milliseconds, and at most until Run gives up on it.
	select {
	case <-s.interp.Ready():
	case <-s.interp.Lost():
		s.opts.Logger.Error("execution refused", "outcome", wire.OutcomeRejected, "error", "python3 ended before the job")
		api.WriteError(w, http.StatusServiceUnavailable, "this runner's python3 ended before the job; nothing ran, send it to another sandbox")
		return
	case <-r.Context().Done():
		s.taken.Store(false)
		return
	}
	defer s.once.Do(func() { close(s.done) })

	// Asked for events (serve relaying a streamed request), the output goes
	// out as it comes, as serve's own streamed answer does.
	var stream *api.EventStream
	if api.WantsEventStream(r.Header) {
		stream = api.NewEventStream(w, api.ServerTiming)
		job.Output = stream.Output
	}
	res, err := s.interp.Run(r.Context(), job)
	begun := stream != nil && stream.Stop()
	res.SandboxID = s.opts.SandboxID
	log := s.opts.Logger.With("sandbox_id", res.SandboxID, "exit_code", res.ExitCode,
		"duration_ms", res.DurationMS, "stdout_bytes", len(res.Stdout), "stderr_bytes", len(res.Stderr))
	fail := func(status int, msg string) {
		if begun {
			stream.Fail(&api.Error{Status: status, Msg: msg})
			return
		}
		api.WriteError(w, status, msg)
	}
	switch {
	case errors.Is(err, exec.ErrNotTaken):
		// Nothing of the job ran: the pool may send it elsewhere.
		log.Error("execution refused", "outcome", wire.OutcomeRejected, "error", err)
		fail(http.StatusServiceUnavailable, "this runner's python3 ended before it took the job; nothing ran, send it to another sandbox: "+err.Error())
		return
	case errors.Is(err, exec.ErrInvalidJob):
		log.Info("execution refused", "outcome", wire.OutcomeRejected, "error", err)
		fail(http.StatusBadRequest, err.Error())
		return
	case err != nil:
		log.Error("execution failed", "outcome", wire.OutcomeFailed, "error", err)
		fail(http.StatusInternalServerError, err.Error())
		return
	}
	log.Info("execution", "outcome", res.Outcome())
	var timing api.Timing
	timing.Add(api.TimingRunnerJob, time.Since(began))
	s.startup.add(&timing, s.born, began)
	// A header, or after the events a trailer (see api.EventStream).
	w.Header().Set(api.ServerTiming, timing.Header())
	if stream != nil {
		stream.Finish(res)
		return
	}
	api.WriteJSON(w, http.StatusOK, res)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// methodNotAllowed turns the mux's plain-text 405 into the JSON error body.
func methodNotAllowed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz", "/readyz", "/seal":
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
