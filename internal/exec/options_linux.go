package exec

import "syscall"

// Options tune how Run starts the child.
type Options struct {
	// Python is the interpreter; "" means python3 from the child's PATH.
	Python string
	// Dir is the working directory; it exists, and Job.Files are written into it.
	Dir string
	// MaxOutput is the number of bytes kept per stream; 0 means DefaultMaxOutput.
	MaxOutput int
	// Env is the child's whole environment; nil means DefaultEnv(Dir).
	Env []string
	// Cloneflags adds namespaces (the local backend); 0 in pods.
	Cloneflags uintptr
	// Credential runs the child as this uid/gid; nil keeps ours.
	Credential *syscall.Credential
	// Sandbox, when set, isolates the run (see Sandbox); Dir, Cloneflags
	// and Credential are then ignored, and the run works in SandboxDir.
	Sandbox *Sandbox

	// MemoryLimit caps the child's address space (RLIMIT_AS) in bytes; a run
	// that dies of it is reported as out of memory. 0 means no cap beyond the
	// cgroup's.
	MemoryLimit int64
	// MaxProcs is the child's RLIMIT_NPROC; 0 means DefaultMaxProcs.
	MaxProcs int
	// MaxFileSize is the child's RLIMIT_FSIZE in bytes; 0 means DefaultMaxFileSize.
	MaxFileSize int64
	// Nice lowers the child's CPU priority (0 to 19). In a pod the runner
	// sets it, so that a snippet keeping every CPU of its cgroup busy still
	// leaves the runner the time to kill it; on a shared host it would
	// only slow the snippet against everything else.
	Nice int
	// IdleCPU puts the child in the SCHED_IDLE class, which its processes
	// inherit: they run only when nothing else of the CPU cgroup wants the
	// CPU. The runner sets it in a pod, with Nice, for the same reason.
	IdleCPU bool

	// Preload are modules (ParsePreload) a pre-started interpreter imports
	// after it is ready and before it reads its job, its output sent to
	// /dev/null; one that fails to import is skipped and reported (see
	// Interp.Missing). A job that arrives first stops the preload at the
	// next module: the job never waits for more than the import under way.
	// Run, which has its job at once, ignores it.
	Preload []string
	// PreloadGate, when set, is asked before each module and warm-up step
	// of the Preload, and the step begins when it returns true; false (or
	// stop, closed when the interpreter takes its job or ends) ends the
	// preload there. WhenCPUIdle makes the preload yield to a busy machine.
	PreloadGate func(stop <-chan struct{}) bool
	// NoWarmUp leaves out, after the Preload, the warm-up steps that pay
	// the modules' first use (preload.go): the first frame, describe() and
	// PNG. Benchmarks set it to compare; nothing else does.
	NoWarmUp bool

	// WeakenKillLeaderOnly makes Run as weak as a naive runner: at the
	// deadline it kills only the python3 process, never sweeps its tree, and
	// waits for the pipes to close. It exists so that `sandbox verify` can be
	// shown to catch a runner without the process-tree kill; never set it
	// otherwise.
	WeakenKillLeaderOnly bool
}

func (o Options) maxOutput() int {
	if o.MaxOutput > 0 {
		return o.MaxOutput
	}
	return DefaultMaxOutput
}

func (o Options) maxProcs() int {
	if o.MaxProcs > 0 {
		return o.MaxProcs
	}
	return DefaultMaxProcs
}

func (o Options) maxFileSize() int64 {
	if o.MaxFileSize > 0 {
		return o.MaxFileSize
	}
	return DefaultMaxFileSize
}
