package exec

import (
	"syscall"
	"time"
)

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

	// UnsafeKillLeaderOnly makes Run as weak as a naive runner: at the
	// deadline it kills only the python3 process, never sweeps its tree, and
	// waits for the pipes to close. It exists so that `sandbox verify` can be
	// shown to catch a runner without the process-tree kill; never set it
	// otherwise.
	UnsafeKillLeaderOnly bool
}

// Limits applied when Options leave them zero.
const (
	// DefaultMaxOutput keeps 1 MiB per stream: plenty for an agent to read,
	// small enough that a flood cannot grow the runner.
	DefaultMaxOutput = 1 << 20

	// DefaultMaxProcs bounds a fork bomb. The kernel counts every task
	// (threads too) of the child's uid in its user namespace, across all
	// containers on the node that share that uid, so the number is generous;
	// the pod's pids cgroup limit is the tight bound in Kubernetes.
	DefaultMaxProcs = 1024

	// DefaultMaxFileSize stops one file from filling the working directory's
	// volume (an emptyDir in the pod); 100 MiB is far above what a snippet
	// needs to write.
	DefaultMaxFileSize = 100 << 20

	// MaxOpenFiles is the child's RLIMIT_NOFILE, soft and hard: Linux's
	// usual soft limit, all that select() can watch. Descriptors are counted
	// per process, so this does not protect the runner's; it bounds what a
	// run can make the kernel hold (its processes times this many open
	// files) and so how long killing the run takes, since every descriptor
	// is closed as its process dies: 50 processes holding 20,000 each took
	// the kernel over 3 s in a pod.
	MaxOpenFiles = 1024

	// DefaultTimeout applies when Job.Timeout is zero; api.DefaultTimeoutS,
	// the request's default, is defined from it.
	DefaultTimeout = 20 * time.Second
)

// defaultPath is the child's PATH: Debian's default, so that python3 and the
// usual tools resolve the same way in the pod and on a developer machine,
// whatever shims the runner's own PATH holds.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// DefaultEnv is the child's environment when Options.Env is nil: nothing of
// the runner's own, only what Python and common tools need.
func DefaultEnv(dir string) []string {
	return []string{
		"PATH=" + defaultPath,
		"HOME=" + dir,
		"LANG=C.UTF-8",
		"PYTHONDONTWRITEBYTECODE=1",
		"PYTHONUNBUFFERED=1",
	}
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
