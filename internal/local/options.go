// Package local is the backend that runs each execution as a process on
// this machine.
//
// As root (what `make run` is) every run is isolated by exec.Sandbox: a uid
// and gid of its own, its own PID, mount, network, IPC and UTS namespaces,
// a read-only view of the host with a fresh /proc and private, size-bounded
// tmpfs for /tmp (its working directory), /var/tmp and /dev/shm, its own
// memory and pids cgroups, no_new_privs and no new user namespaces. Runs
// cannot see, signal or write one another, and nothing of a run outlives it.
// Where a property cannot be had, IsolationAuto says which in the log and
// IsolationStrict refuses to start. It still shares the host's kernel and
// can read what any user may read on the host.
//
// A few runs wait, started ahead with Options.Preload imported, each for
// one job (warm_linux.go); a job that finds none starts its own.
//
// It is Linux only (its files are named *_linux.go), as exec's running is;
// its options build everywhere, for the flags that name them.
package local

import (
	"log/slog"
	"time"
)

// Isolation modes.
const (
	// IsolationAuto isolates runs as far as the host allows and logs each
	// property it could not get.
	IsolationAuto = "auto"
	// IsolationStrict requires every property: New fails without one.
	IsolationStrict = "strict"
	// IsolationNone runs the child as a plain process, as this user. Tests
	// use it as the positive control of their attacks.
	IsolationNone = "none"
)

// Defaults for Options.
const (
	// DefaultQueueWait matches the pool's wait for a warm pod: long enough to
	// ride out a burst, short enough that an agent hears back.
	DefaultQueueWait = 30 * time.Second
	// DefaultMemoryLimit bounds each run's memory: its memory cgroup where
	// the host has one, else its address space (RLIMIT_AS). It is above a
	// pod's 512 MiB because without a cgroup address space overcounts what
	// Python really uses.
	DefaultMemoryLimit = 1 << 30
	// DefaultWarm is how many pre-started interpreters the backend keeps
	// (fewer with fewer slots): two, so that an agent's calls in a row find
	// one even when the next comes before the last one's replacement has
	// done its preload (a second or more of CPU at the lowest weight); each
	// holds a uid, cgroups and, with the data stack, about 80 MiB.
	DefaultWarm = 2
	retryAfter  = time.Second
	// runSlack is what a run may take past its timeout: exec kills the
	// tree at the deadline and waits a moment for it to exit and for its
	// output.
	runSlack = 10 * time.Second
)

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
	// MemoryLimit bounds each run's memory in bytes (see
	// DefaultMemoryLimit); 0 means DefaultMemoryLimit, negative means none.
	MemoryLimit int64
	// MaxProcs bounds each run's processes and threads; 0 means exec's
	// default.
	MaxProcs int
	// DiskLimit bounds each of a run's tmpfs mounts; 0 means exec's
	// default.
	DiskLimit int64
	// Warm is how many pre-started interpreters wait for a job, each used
	// for one, at most MaxConcurrent; 0 means DefaultWarm, negative none.
	Warm int
	// Preload are the modules (exec.ParsePreload) the pre-started
	// interpreters import while they wait; a run started for its job
	// imports nothing ahead.
	Preload []string
	// NoWarmUp leaves out the preload's warm-up steps (exec.Options.NoWarmUp):
	// for benchmarks that compare.
	NoWarmUp bool
	// Isolation is IsolationAuto (""), IsolationStrict or IsolationNone.
	Isolation string
	// Logger receives the start-up report; nil discards it.
	Logger *slog.Logger
}
