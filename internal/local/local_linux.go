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
	b := &Backend{opts: opts, log: log, sem: make(chan struct{}, opts.MaxConcurrent), uids: uidSet{m: map[uint32]bool{}}}
	if err := b.chooseIsolation(ctx); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// Execute runs job in a fresh sandbox once a slot is free.
func (b *Backend) Execute(ctx context.Context, job exec.Job) (wire.Result, error) {
	if err := b.acquire(ctx); err != nil {
		return wire.Result{}, err
	}
	defer b.release()
	res, err := b.run(ctx, job, b.iso)
	if errors.Is(err, exec.ErrInvalidJob) {
		return wire.Result{}, api.Errorf(http.StatusBadRequest, "%v", err)
	}
	return res, err
}

// run is one execution under iso, with a fresh id.
func (b *Backend) run(ctx context.Context, job exec.Job, iso isolation) (wire.Result, error) {
	opts := exec.Options{
		Python:    b.opts.Python,
		MaxOutput: b.opts.MaxOutput,
		MaxProcs:  b.opts.MaxProcs,
	}
	var uid uint32
	if iso.ownUID {
		uid = b.uids.take(iso.sharedUID)
		defer b.uids.give(uid)
	}
	if iso.sandbox {
		opts.Sandbox = &exec.Sandbox{UID: uid, GID: uid, DiskLimit: b.opts.DiskLimit, Cgroups: iso.cgroups,
			MemoryLimit: b.opts.MemoryLimit, NoSeccomp: !iso.seccomp}
		if iso.cgroups == nil || iso.cgroups.Memory == "" {
			opts.MemoryLimit = b.opts.MemoryLimit
		}
	} else {
		dir, err := os.MkdirTemp(b.base, "run-")
		if err != nil {
			return wire.Result{}, fmt.Errorf("local backend: %w", err)
		}
		defer b.removeAll(dir)
		opts.Dir = dir
		// Temporary files go to the run's directory, which is removed, not
		// to the host's /tmp, which later runs would see.
		opts.Env = append(exec.DefaultEnv(dir), "TMPDIR="+dir)
		opts.Cloneflags = iso.cloneflags
		opts.MemoryLimit = b.opts.MemoryLimit
		if iso.ownUID {
			opts.Credential = &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}
			if err := os.Chmod(dir, 0o700); err != nil {
				return wire.Result{}, fmt.Errorf("local backend: %w", err)
			}
		}
	}
	res, err := exec.Run(ctx, job, opts)
	res.SandboxID = exec.LocalID()
	return res, err
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

// Close removes the backend's directory. Call it after the last Execute.
func (b *Backend) Close() error {
	b.closed.Store(true)
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
