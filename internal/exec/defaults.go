package exec

import "time"

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
