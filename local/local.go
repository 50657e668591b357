// Package local is the backend that runs each execution as a process on
// this machine: a fresh temporary directory, exec.Run, and Linux namespaces
// where the host allows them (with uid 65534 when we are root, inside a user
// namespace of its own when we are not).
//
// It is weaker than the Kubernetes backend, and says so: the child shares
// the host's kernel, filesystem (read access as its uid allows) and, without
// namespaces, network; there is no per-run cgroup, only rlimits. It is meant
// for development and for one trusted machine.
package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandbox/api"
	"github.com/sandboxd/sandbox/exec"
)

// Isolation modes.
const (
	// IsolationAuto uses namespaces and a non-root uid where the host allows
	// them, and falls back (with a warning) where it does not.
	IsolationAuto = "auto"
	// IsolationStrict requires namespaces: New fails without them.
	IsolationStrict = "strict"
	// IsolationNone runs the child as a plain process, as this user. Tests
	// use it as the positive control of the network check.
	IsolationNone = "none"
)

// Defaults for Options.
const (
	// DefaultQueueWait matches the pool's wait for a warm pod: long enough to
	// ride out a burst, short enough that an agent hears back.
	DefaultQueueWait = 30 * time.Second
	// DefaultMemoryLimit caps each child's address space. The local backend
	// has no cgroup per run, so this rlimit is what stops one snippet from
	// taking the machine's memory; it is above a pod's 512 MiB because
	// address space overcounts what Python really uses.
	DefaultMemoryLimit = 1 << 30
	// nobody is the uid and gid the child runs as when we are root: it owns
	// nothing on a typical host.
	nobody     = 65534
	retryAfter = time.Second
)

// namespaces are the ones a child gets when the host allows: no network at
// all (not even loopback is up), its own PIDs, mounts, IPC and hostname. A
// variable so that a test can make the kernel refuse them.
var namespaces uintptr = syscall.CLONE_NEWNET | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS |
	syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS

// Options configure the local backend.
type Options struct {
	// Python is the interpreter; "" means python3 from the child's PATH.
	Python string
	// MaxConcurrent bounds executions running at once; 0 means 2 × CPUs.
	MaxConcurrent int
	// QueueWait is how long an execution waits for a slot before a 503;
	// 0 means DefaultQueueWait.
	QueueWait time.Duration
	// MaxOutput is the bytes kept per stream; 0 means exec's default.
	MaxOutput int
	// MemoryLimit is each child's RLIMIT_AS in bytes; 0 means
	// DefaultMemoryLimit, negative means none.
	MemoryLimit int64
	// Isolation is IsolationAuto (""), IsolationStrict or IsolationNone.
	Isolation string
	// Logger receives the start-up report; nil discards it.
	Logger *slog.Logger
}

// Backend runs executions as local processes. It implements server.Backend.
type Backend struct {
	opts       Options
	log        *slog.Logger
	base       string // holds the per-run directories; 0755 so a non-root child can reach its own
	cloneflags uintptr
	cred       *syscall.Credential
	sem        chan struct{}

	busy, waiting atomic.Int64
	closed        atomic.Bool
}

// New probes what isolation the host allows, logs it, and returns the
// backend. Close removes its directory.
func New(ctx context.Context, opts Options) (*Backend, error) {
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = 2 * runtime.NumCPU()
	}
	if opts.QueueWait <= 0 {
		opts.QueueWait = DefaultQueueWait
	}
	if opts.MemoryLimit == 0 {
		opts.MemoryLimit = DefaultMemoryLimit
	}
	if opts.MemoryLimit < 0 {
		opts.MemoryLimit = 0
	}
	if opts.Isolation == "" {
		opts.Isolation = IsolationAuto
	}
	switch opts.Isolation {
	case IsolationAuto, IsolationStrict, IsolationNone:
	default:
		return nil, fmt.Errorf("local backend: unknown isolation %q: use auto, strict or none", opts.Isolation)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	base, err := os.MkdirTemp("", "sandbox-local-")
	if err != nil {
		return nil, fmt.Errorf("local backend: %w", err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		os.RemoveAll(base)
		return nil, fmt.Errorf("local backend: %w", err)
	}
	b := &Backend{opts: opts, log: log, base: base, sem: make(chan struct{}, opts.MaxConcurrent)}
	if err := b.chooseIsolation(ctx); err != nil {
		os.RemoveAll(base)
		return nil, err
	}
	return b, nil
}

// chooseIsolation tries the strongest setting first and keeps the first
// one under which a probe snippet runs.
func (b *Backend) chooseIsolation(ctx context.Context) error {
	log := b.log
	log.Warn("local backend: every execution is a process on this machine, which is weaker isolation than a " +
		"Kubernetes pod: it shares the host's kernel and can read what its uid may read; there is no cgroup " +
		"per run. Use it for development or on one trusted machine.")
	if b.opts.Isolation == IsolationNone {
		log.Warn("local backend: isolation off: snippets run as this user, with the host's network")
		if err := b.probe(ctx, 0, nil); err != nil {
			return fmt.Errorf("local backend: cannot run snippets: %w", err)
		}
		return nil
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}
	}
	type attempt struct {
		flags uintptr
		cred  *syscall.Credential
	}
	attempts := []attempt{{namespaces, cred}}
	if cred == nil {
		// Not root: only a user namespace of our own lets us create the
		// others. Left without a uid map, the child is the overflow uid
		// (65534) inside and still us on disk, so it can use its directory.
		attempts = []attempt{{namespaces | syscall.CLONE_NEWUSER, nil}}
	}
	if b.opts.Isolation == IsolationAuto && cred != nil {
		attempts = append(attempts, attempt{0, cred})
	}
	var errs []error
	for _, a := range attempts {
		err := b.probe(ctx, a.flags, a.cred)
		if err == nil {
			b.cloneflags, b.cred = a.flags, a.cred
			break
		}
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		if b.opts.Isolation == IsolationStrict {
			return fmt.Errorf("local backend: namespaces unavailable (isolation strict): %w", errors.Join(errs...))
		}
		log.Warn("local backend: namespaces unavailable on this host, falling back: snippets see the host's "+
			"network and processes", "error", errors.Join(errs...).Error())
	}
	if len(errs) == len(attempts) {
		// Nothing isolated worked; make sure a plain child does, so that a
		// missing interpreter fails here and not on every request.
		if err := b.probe(ctx, 0, nil); err != nil {
			return fmt.Errorf("local backend: cannot run snippets: %w", err)
		}
	}
	uid := os.Geteuid()
	if b.cred != nil {
		uid = int(b.cred.Uid)
	}
	log.Info("local backend ready",
		"namespaces", b.cloneflags != 0,
		"user_namespace", b.cloneflags&syscall.CLONE_NEWUSER != 0,
		"network", map[bool]string{true: "none", false: "host"}[b.cloneflags != 0],
		"uid", uid,
		"max_concurrent", b.opts.MaxConcurrent,
		"memory_limit_bytes", b.opts.MemoryLimit)
	if uid == 0 {
		log.Warn("local backend: snippets run as root")
	}
	return nil
}

// probe runs a trivial snippet under flags and cred; it fails when the
// kernel refuses the namespaces or the uid cannot run Python.
func (b *Backend) probe(ctx context.Context, flags uintptr, cred *syscall.Credential) error {
	res, err := b.run(ctx, exec.Job{Code: "import os, sys\nsys.exit(0 if os.getcwd() else 1)\n", Timeout: 10 * time.Second}, flags, cred)
	if err != nil {
		return fmt.Errorf("probe (namespaces %v, uid %v): %w", flags != 0, cred != nil, err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("probe (namespaces %v, uid %v) exited %d: %s", flags != 0, cred != nil, res.ExitCode, res.Stderr)
	}
	return nil
}

// Execute runs job in a fresh directory once a slot is free.
func (b *Backend) Execute(ctx context.Context, job exec.Job) (exec.Result, error) {
	if err := b.acquire(ctx); err != nil {
		return exec.Result{}, err
	}
	defer b.release()
	res, err := b.run(ctx, job, b.cloneflags, b.cred)
	if errors.Is(err, exec.ErrInvalidJob) {
		return exec.Result{}, api.Errorf(http.StatusBadRequest, "%v", err)
	}
	return res, err
}

// run is one execution: a fresh directory, exec.Run, a fresh id.
func (b *Backend) run(ctx context.Context, job exec.Job, flags uintptr, cred *syscall.Credential) (exec.Result, error) {
	dir, err := os.MkdirTemp(b.base, "run-")
	if err != nil {
		return exec.Result{}, fmt.Errorf("local backend: %w", err)
	}
	defer b.removeAll(dir)
	res, err := exec.Run(ctx, job, exec.Options{
		Python: b.opts.Python,
		Dir:    dir,
		// Temporary files go to the run's directory, which is removed, not
		// to the host's /tmp, which later runs would see.
		Env:         append(exec.DefaultEnv(dir), "TMPDIR="+dir),
		MaxOutput:   b.opts.MaxOutput,
		Cloneflags:  flags,
		Credential:  cred,
		MemoryLimit: b.opts.MemoryLimit,
	})
	res.SandboxID = exec.LocalID()
	return res, err
}

// acquire waits for an execution slot, at most QueueWait.
func (b *Backend) acquire(ctx context.Context) error {
	select {
	case b.sem <- struct{}{}:
		b.busy.Add(1)
		return nil
	default:
	}
	b.waiting.Add(1)
	defer b.waiting.Add(-1)
	t := time.NewTimer(b.opts.QueueWait)
	defer t.Stop()
	select {
	case b.sem <- struct{}{}:
		b.busy.Add(1)
		return nil
	case <-t.C:
		return &api.Error{
			Status:     http.StatusServiceUnavailable,
			Msg:        fmt.Sprintf("all %d local execution slots stayed busy for %s, try again shortly", cap(b.sem), b.opts.QueueWait),
			RetryAfter: retryAfter,
		}
	case <-ctx.Done():
		return fmt.Errorf("wait for an execution slot: %w", context.Cause(ctx))
	}
}

func (b *Backend) release() {
	b.busy.Add(-1)
	<-b.sem
}

// removeAll removes a run's directory, even one the snippet made hard to
// remove (a subdirectory without write or search permission).
func (b *Backend) removeAll(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	_ = chmodTree(dir)
	if err := os.RemoveAll(dir); err != nil {
		b.log.Error("local backend: remove run directory", "dir", dir, "error", err.Error())
	}
}

// Ready reports whether the backend takes executions: until Close, since a
// local process can always be started, or waited for.
func (b *Backend) Ready() bool { return !b.closed.Load() }

// Isolated reports whether executions get namespaces (no network).
func (b *Backend) Isolated() bool { return b.cloneflags != 0 }

// Close removes the backend's directory. Call it after the last Execute.
func (b *Backend) Close() error {
	b.closed.Store(true)
	return os.RemoveAll(b.base)
}

// RegisterMetrics adds the backend's gauges to reg; server.New calls it.
func (b *Backend) RegisterMetrics(reg prometheus.Registerer) error {
	isolated := 0.0
	if b.Isolated() {
		isolated = 1
	}
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandbox_local_slots", Help: "Executions the local backend runs at once."},
			func() float64 { return float64(cap(b.sem)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandbox_local_slots_busy", Help: "Local execution slots in use."},
			func() float64 { return float64(b.busy.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandbox_local_queue_waiting", Help: "Executions waiting for a local slot."},
			func() float64 { return float64(b.waiting.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandbox_local_namespaces", Help: "1 when local executions run in their own namespaces (no network)."},
			func() float64 { return isolated }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("local backend metrics: %w", err)
		}
	}
	return nil
}
