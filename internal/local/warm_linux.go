package local

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/wire"
)

// Pre-started interpreters.
//
// A pod's python3 is started, and imports --preload, before its job
// exists; a local run's used to start with its job, so that a data snippet
// paid its imports (a second or more of CPU) in every run. The backend
// keeps a few runs of its own started ahead in the same way: each set up
// exactly as a run started for its job (exec.Prestart: its own uid, its
// sandbox, cgroups and limits as root; a directory of its own otherwise),
// its python3 waiting with Options.Preload imported, at the lowest CPU
// weight until its job comes. Each takes one job and is then gone; the
// pool starts its replacement in the background after every take. A job
// that finds none ready starts one for itself, as before: it never waits
// for the pool.
//
// Every waiting one holds a uid, its cgroups and mounts, and the memory
// of its python3 and preload (the data stack: about 80 MiB, counted
// against that run's own memory limit), so the pool is small: see
// DefaultWarm.
type warmPool struct {
	b    *Backend
	size int

	mu      sync.Mutex
	idle    []*warmRun // oldest first
	filling bool       // a filler goroutine runs
	closed  bool
	fillers sync.WaitGroup
}

// newWarmPool returns a pool of size and starts filling it.
func newWarmPool(b *Backend, size int) *warmPool {
	w := &warmPool{b: b, size: size}
	w.mu.Lock()
	w.fill()
	w.mu.Unlock()
	return w
}

// warmRun is one pre-started run and what its release gives back.
type warmRun struct {
	p       *exec.Interp
	release func()
}

// take returns a waiting interpreter, one whose preload is done before one
// still importing, or nil; either way it has the pool replace what is
// missing.
func (w *warmPool) take() *warmRun {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	defer w.fill()
	pick := -1
	for i := 0; i < len(w.idle); {
		r := w.idle[i]
		if isClosed(r.p.Lost()) {
			// It ended while waiting: killed, or out of memory.
			w.b.log.Warn("local backend: a pre-started python3 ended before a job", "error", errString(r.close()))
			w.idle = append(w.idle[:i], w.idle[i+1:]...)
			continue
		}
		if isClosed(r.p.Ready()) {
			if len(w.b.opts.Preload) == 0 || isClosed(r.p.Preloaded()) {
				pick = i
				break
			}
			if pick < 0 {
				pick = i // still importing: the job stops that at the next module
			}
		}
		i++
	}
	if pick < 0 {
		return nil
	}
	r := w.idle[pick]
	w.idle = append(w.idle[:pick], w.idle[pick+1:]...)
	return r
}

// fill starts the filler unless it runs; w.mu is held.
func (w *warmPool) fill() {
	if w.filling || w.closed || len(w.idle) >= w.size {
		return
	}
	w.filling = true
	w.fillers.Go(w.filler)
}

// filler starts runs, one at a time, until the pool is full or closed.
func (w *warmPool) filler() {
	for {
		w.mu.Lock()
		if w.closed || len(w.idle) >= w.size {
			w.filling = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		r, err := w.start()
		w.mu.Lock()
		switch {
		case err != nil:
			// Runs started for their jobs still work; the pool tries again
			// at the next take.
			w.filling = false
			w.mu.Unlock()
			w.b.log.Warn("local backend: could not pre-start python3", "error", err.Error())
			return
		case w.closed:
			w.mu.Unlock()
			r.close()
			continue
		}
		w.idle = append(w.idle, r)
		w.mu.Unlock()
	}
}

// start pre-starts one run under the backend's isolation.
func (w *warmPool) start() (*warmRun, error) {
	opts, release, err := w.b.prepare(w.b.iso)
	if err != nil {
		return nil, err
	}
	opts.Preload, opts.NoWarmUp = w.b.opts.Preload, w.b.opts.NoWarmUp
	p, err := exec.Prestart(opts)
	if err != nil {
		release()
		return nil, err
	}
	return &warmRun{p: p, release: release}, nil
}

// await is take for the tests that must go through the pool: it waits for
// a preloaded interpreter until ctx ends or for at most wait.
func (w *warmPool) await(ctx context.Context, wait time.Duration) *warmRun {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		w.mu.Lock()
		for i, r := range w.idle {
			if isClosed(r.p.Ready()) && (len(w.b.opts.Preload) == 0 || isClosed(r.p.Preloaded())) {
				w.idle = append(w.idle[:i], w.idle[i+1:]...)
				w.fill()
				w.mu.Unlock()
				return r
			}
		}
		w.fill()
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// run gives r its job; r is gone after it.
func (r *warmRun) run(ctx context.Context, job exec.Job) (wire.Result, error) {
	defer r.release()
	defer r.p.Close()
	res, err := r.p.Run(ctx, job)
	res.SandboxID = exec.LocalID()
	return res, err
}

// close kills r unused and releases what it held; it says how r had ended
// if it ended by itself.
func (r *warmRun) close() error {
	err := r.p.Close()
	r.release()
	return err
}

// close kills every waiting interpreter and returns once the filler has
// stopped: no process of the pool is left.
func (w *warmPool) close() {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.closed = true
	idle := w.idle
	w.idle = nil
	w.mu.Unlock()
	for _, r := range idle {
		r.close()
	}
	w.fillers.Wait()
}

// waiting is how many pre-started interpreters wait for a job.
func (w *warmPool) waiting() int {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.idle)
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// errNotTaken reports whether a pre-started run ended without running any
// of its job, which may then run elsewhere.
func errNotTaken(err error) bool { return errors.Is(err, exec.ErrNotTaken) }
