package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/wire"
)

// Backend runs executions as local processes. It implements server.Backend.
type Backend struct {
	opts Options
	log  *slog.Logger
	iso  isolation
	// base holds the per-run directories of the weaker modes (0711, so a
	// child of another uid reaches its own); "" when runs are sandboxed.
	base string
	sem  chan struct{}
	uids uidSet
	warm *warmPool // nil without pre-started interpreters

	busy, waiting atomic.Int64
	warmTaken     atomic.Int64 // executions a pre-started interpreter ran
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
	if opts.Warm == 0 {
		opts.Warm = DefaultWarm
	}
	// More would wait for a slot.
	opts.Warm = min(opts.Warm, opts.MaxConcurrent)
	switch opts.Isolation {
	case IsolationAuto, IsolationStrict, IsolationNone:
	default:
		return nil, fmt.Errorf("local backend: unknown isolation %q: use auto, strict or none", opts.Isolation)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &Backend{opts: opts, log: log, sem: make(chan struct{}, opts.MaxConcurrent), uids: uidSet{m: map[uint32]bool{}}}
	if err := b.chooseIsolation(ctx); err != nil {
		b.Close()
		return nil, err
	}
	if opts.Warm > 0 {
		b.warm = newWarmPool(b, opts.Warm)
	}
	b.log.Info("local backend: pre-started python3 interpreters", "warm", max(opts.Warm, 0),
		"preload", strings.Join(opts.Preload, ","))
	return b, nil
}

// Execute runs job in a fresh sandbox once a slot is free.
func (b *Backend) Execute(ctx context.Context, job exec.Job) (wire.Result, error) {
	if err := b.acquire(ctx); err != nil {
		return wire.Result{}, err
	}
	defer b.release()
	res, err := b.execute(ctx, job)
	if errors.Is(err, exec.ErrInvalidJob) {
		return wire.Result{}, api.Errorf(http.StatusBadRequest, "%v", err)
	}
	return res, err
}

// warmOnly makes every execution wait for a pre-started interpreter and
// never start one for itself: the tests' way to run their attacks through
// the pool (TestThroughThePool). Never set otherwise.
var warmOnly bool

// warmOnlyWait bounds warmOnly's wait for a pre-started interpreter, so
// that a pool that never delivers fails the test rather than hangs it.
const warmOnlyWait = 3 * time.Minute

// execute runs job on a pre-started interpreter when one waits, else on
// one started for it; also when the one it took had ended before the job,
// of which then nothing ran.
func (b *Backend) execute(ctx context.Context, job exec.Job) (wire.Result, error) {
	var r *warmRun
	if !warmOnly || b.warm == nil {
		r = b.warm.take()
	} else if r = b.warm.await(ctx, warmOnlyWait); r == nil {
		return wire.Result{}, fmt.Errorf("local backend (warm only): no pre-started python3: %w", context.Cause(ctx))
	}
	if r != nil {
		b.warmTaken.Add(1)
		res, err := r.run(ctx, job)
		if !errNotTaken(err) || warmOnly {
			return res, err
		}
		b.log.Warn("local backend: a pre-started python3 ended before its job; starting one for it", "error", err.Error())
	}
	return b.run(ctx, job, b.iso)
}

// run is one execution under iso, with a fresh id, started for it.
func (b *Backend) run(ctx context.Context, job exec.Job, iso isolation) (wire.Result, error) {
	opts, release, err := b.prepare(iso)
	if err != nil {
		return wire.Result{}, err
	}
	defer release()
	res, err := exec.Run(ctx, job, opts)
	res.SandboxID = exec.LocalID()
	return res, err
}

// mplConfig is matplotlib's configuration and cache directory in a run,
// beside the working directory rather than in it (HOME): a preload of
// matplotlib writes its font list there before the job, which must find
// its working directory holding its own files alone. The sandbox image
// sets the same for pods.
const mplConfig = "MPLCONFIGDIR="

// prepare makes what one run under iso needs before its python3 starts: a
// uid of its own, and in the weaker modes a directory on the host.
// release gives them back once the run's processes are gone.
func (b *Backend) prepare(iso isolation) (opts exec.Options, release func(), err error) {
	opts = exec.Options{
		Python:    b.opts.Python,
		MaxOutput: b.opts.MaxOutput,
		MaxProcs:  b.opts.MaxProcs,
	}
	var uid uint32
	var undo []func()
	release = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	if iso.ownUID {
		uid = b.uids.take(iso.sharedUID)
		undo = append(undo, func() { b.uids.give(uid) })
	}
	if iso.sandbox {
		opts.Sandbox = &exec.Sandbox{UID: uid, GID: uid, DiskLimit: b.opts.DiskLimit, Cgroups: iso.cgroups,
			MemoryLimit: b.opts.MemoryLimit, NoSeccomp: !iso.seccomp}
		opts.Env = append(exec.DefaultEnv(exec.SandboxDir), mplConfig+"/tmp/matplotlib")
		if iso.cgroups == nil || iso.cgroups.Memory == "" {
			opts.MemoryLimit = b.opts.MemoryLimit
		}
		return opts, release, nil
	}
	// The run's directory holds its working directory and its temporary
	// files apart: temporary files go there, not to the host's /tmp, which
	// later runs would see, and not into the working directory, which
	// holds the job's files alone.
	dir, err := os.MkdirTemp(b.base, "run-")
	if err != nil {
		release()
		return opts, nil, fmt.Errorf("local backend: %w", err)
	}
	undo = append(undo, func() { b.removeAll(dir) })
	work, tmp := filepath.Join(dir, "work"), filepath.Join(dir, "tmp")
	for _, d := range []string{work, tmp} {
		if err := os.Mkdir(d, 0o700); err != nil {
			release()
			return opts, nil, fmt.Errorf("local backend: %w", err)
		}
	}
	opts.Dir = work
	opts.Env = append(exec.DefaultEnv(work), "TMPDIR="+tmp, mplConfig+filepath.Join(tmp, "matplotlib"))
	opts.Cloneflags = iso.cloneflags
	opts.MemoryLimit = b.opts.MemoryLimit
	if iso.ownUID {
		opts.Credential = &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}
		// Root's and closed to listing; the run owns what is inside (exec
		// gives it the working directory).
		err := os.Chmod(dir, 0o711)
		if err == nil {
			err = os.Lchown(tmp, int(uid), int(uid))
		}
		if err != nil {
			release()
			return opts, nil, fmt.Errorf("local backend: %w", err)
		}
	}
	return opts, release, nil
}

// MaxAnswer is the longest an execution may take: the wait for a slot, the
// longest snippet, and runSlack. It implements server.MaxAnswerer.
func (b *Backend) MaxAnswer() time.Duration {
	return b.opts.QueueWait + api.MaxTimeoutS*time.Second + runSlack
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

// removeAll removes a run's directory in the weaker modes. As root it
// needs no help (and must not chmod: a run can swap a directory for a
// symlink under a walk); as another user the run had our uid, so making
// its directories writable again can reach nothing it could not.
func (b *Backend) removeAll(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	if os.Geteuid() != 0 {
		_ = chmodTree(dir)
	}
	if err := os.RemoveAll(dir); err != nil {
		b.log.Error("local backend: remove run directory", "dir", dir, "error", err.Error())
	}
}

// Ready reports whether the backend takes executions: until Close, since a
// local process can always be started, or waited for.
func (b *Backend) Ready() bool { return !b.closed.Load() }

// Isolated reports whether executions get namespaces (no network).
func (b *Backend) Isolated() bool { return b.iso.sandbox || b.iso.cloneflags != 0 }

// Sandboxed reports whether executions get every property of exec.Sandbox
// that the host has (see Missing for those it lacks).
func (b *Backend) Sandboxed() bool { return b.iso.sandbox }

// Missing lists the isolation properties this host could not give.
func (b *Backend) Missing() []string { return b.iso.missing }

// Close kills the pre-started interpreters, waiting until none is left,
// and removes the backend's directory. Call it after the last Execute.
func (b *Backend) Close() error {
	b.closed.Store(true)
	b.warm.close()
	if b.base == "" {
		return nil
	}
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
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandbox_local_warm", Help: "Pre-started local python3 interpreters waiting for a job."},
			func() float64 { return float64(b.warm.waiting()) }),
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
